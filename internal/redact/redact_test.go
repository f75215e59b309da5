package redact

import (
	"strings"
	"testing"
)

func TestValuesText(t *testing.T) {
	key := "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END KEY-----"
	v := NewValues("hunter2-password", "hunter2", "abc", "", "  tok-en-1234  ", key)
	for _, tc := range []struct{ name, in, want string }{
		{"a whole value", "login failed for hunter2-password", "login failed for [secret]"},
		{"the longer value first", "hunter2-password and hunter2", "[secret] and [secret]"},
		{"short values are not masked", "abc is fine", "abc is fine"},
		{"values are trimmed", "token tok-en-1234 refused", "token [secret] refused"},
		{"a line of a multi-line value", "bad key line MIIEvQIBADANBgkqhkiG9w0BAQEFAASC here", "bad key line [secret] here"},
		{"a value cut before an ellipsis", `echoed: "hunter2-pass…" refused`, `echoed: "[secret]…" refused`},
		{"a value cut before three dots", `echoed: "hunter2-pa..." refused`, `echoed: "[secret]..." refused`},
		{"a cut start shorter than 8 bytes stays", `echoed: "hunte…"`, `echoed: "hunte…"`},
		{"nothing secret", "all good", "all good"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := v.Text(tc.in); got != tc.want {
				t.Fatalf("Text(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	if got := (Values{}).Text("hunter2-password"); got != "hunter2-password" {
		t.Fatalf("the zero Values masked: %q", got)
	}
	// hunter2-password, hunter2, tok-en-1234, the key and its three lines;
	// "abc" and "" are too short.
	if n := v.Len(); n != 7 {
		t.Fatalf("Len = %d, want 7: %q", n, v.List())
	}
}

func TestURLCredentials(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://x-access-token:ghp_abc@github.com/o/r.git", "https://***@github.com/o/r.git"},
		{"fetch https://user@example.com/r failed; retry ssh://git:pw@host:22/r", "fetch https://***@example.com/r failed; retry ssh://***@host:22/r"},
		{"https://github.com/o/r.git", "https://github.com/o/r.git"},
		{"https://github.com/o/r@v1", "https://github.com/o/r@v1"},
		{"git@github.com:o/r.git", "git@github.com:o/r.git"},
		{"", ""},
	} {
		if got := URLCredentials(tc.in); got != tc.want {
			t.Errorf("URLCredentials(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzText: no secret value of at least MinLength survives masking, whatever
// surrounds it.
func FuzzText(f *testing.F) {
	f.Add("hunter2-password", "before ", " after")
	f.Add("a\nmulti-line secret", "x", "…")
	f.Fuzz(func(t *testing.T, secret, before, after string) {
		if strings.ContainsRune(secret, 0) {
			return // the marker below stands for the mask
		}
		v := NewValues(secret)
		out := v.Text(before + secret + after)
		// The mask itself may contain a value ("ecre"): look past it.
		rest := strings.ReplaceAll(out, Mask, "\x00")
		for _, s := range v.List() {
			if strings.Contains(rest, s) {
				t.Fatalf("secret %q survives in %q", s, out)
			}
		}
	})
}

// FuzzURLCredentials: no userinfo survives in a URL built with one.
func FuzzURLCredentials(f *testing.F) {
	f.Add("https", "user:token", "example.com/r")
	f.Fuzz(func(t *testing.T, scheme, userinfo, rest string) {
		if scheme == "" || userinfo == "" || strings.ContainsAny(userinfo, "/?#@ \t\n\r\f\v") || !isScheme(scheme) {
			return
		}
		out := URLCredentials(scheme + "://" + userinfo + "@" + rest)
		if strings.Contains(out, "://"+userinfo+"@") {
			t.Fatalf("userinfo %q survives in %q", userinfo, out)
		}
	})
}

func isScheme(s string) bool {
	for i, c := range s {
		alpha := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !(alpha || i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '.' || c == '-')) {
			return false
		}
	}
	return true
}
