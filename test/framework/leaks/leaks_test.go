package leaks

import (
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
)

func TestSearch(t *testing.T) {
	const v = "sfkey-0123456789abcdef0123456789abcdef" // 38 bytes
	const short = "ghp_x1y2z3w4q5"                     // 14 bytes: searched whole only
	const odd = `p@ss"w<o>rd&/?+ é`                    // escaped differently by JSON and URLs
	const urlAlphabet = "??>??>??>??>??>"              // its base64 has + where base64url has -
	for _, tc := range []struct {
		name   string
		values []string
		text   string
		form   string // "" for no leak
	}{
		{"verbatim", []string{v}, "error: " + v + " refused", "value"},
		{"absent", []string{v}, "error: [secret] refused", ""},
		{"cut inside", []string{v}, "message: …sfkey-0123456789ab", "part"},
		{"tail part", []string{v}, "x 6789abcdef0123 y", "part"},
		{"part shorter than the window", []string{v}, "sfkey-01234", ""},
		{"short value whole", []string{short}, "token=" + short, "value"},
		{"short value parts not searched", []string{short}, "token=ghp_x1y2z3w4q", ""},
		{"json escaped", []string{odd}, `{"m":"p@ss\"w\u003co\u003erd\u0026/?+ é"}`, "json"},
		{"json unescaped html", []string{odd}, `{"m":"p@ss\"w<o>rd&/?+ é"}`, "json"},
		{"url query", []string{odd}, "https://h/x?p=" + url.QueryEscape(odd), "url query"},
		{"url path", []string{odd}, "https://u:" + url.PathEscape(odd) + "@h/x", "url path"},
		{"base64 aligned", []string{v}, "data: " + base64.StdEncoding.EncodeToString([]byte(v)), "base64"},
		{"base64 after 1 byte", []string{v}, base64.StdEncoding.EncodeToString([]byte("u" + v)), "base64"},
		{"base64 after 2 bytes", []string{v}, base64.StdEncoding.EncodeToString([]byte("u:" + v + "!")), "base64"},
		{"basic auth header", []string{odd + "-long-enough"}, "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("user:"+odd+"-long-enough")), "base64"},
		{"base64url", []string{urlAlphabet}, base64.URLEncoding.EncodeToString([]byte("ab" + urlAlphabet)), "base64url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaks, err := Search(tc.values, map[string]string{"log": tc.text})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.form == "" && len(leaks) > 0:
				t.Errorf("found %v in %q", leaks, tc.text)
			case tc.form != "" && (len(leaks) != 1 || leaks[0].Form != tc.form || leaks[0].Text != "log"):
				t.Errorf("found %v in %q, want one %s leak", leaks, tc.text, tc.form)
			}
		})
	}
	if _, err := Search([]string{"12345678901"}, nil); err == nil || !strings.Contains(err.Error(), "too short") {
		t.Errorf("an 11-byte value: %v, want it refused", err)
	}
}

// FuzzBase64Contains: whatever surrounds a value in an encoded text, one of
// its base64 forms is found there.
func FuzzBase64Contains(f *testing.F) {
	f.Add("sfkey-0123456789abcdef", "", "")
	f.Add("ghp_x1y2z3w4q5r6", "user:", "\n")
	f.Fuzz(func(t *testing.T, value, before, after string) {
		if len(value) < MinLength {
			return
		}
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding} {
			text := enc.EncodeToString([]byte(before + value + after))
			leaks, err := Search([]string{value}, map[string]string{"t": text})
			if err != nil {
				t.Fatal(err)
			}
			if len(leaks) == 0 {
				t.Fatalf("%q inside %q, encoded %q: not found", value, before+value+after, text)
			}
		}
	})
}
