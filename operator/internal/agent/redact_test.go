package agent

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestRedactorStaysBounded(t *testing.T) {
	tests := []struct {
		name string
		// do runs the calls against a redactor holding the permanent
		// credential "git-token-value".
		do       func(r *redactor)
		wantSize int
		redacted []string
		kept     []string
	}{
		{
			name: "the same secret config selected a thousand times",
			do: func(r *redactor) {
				for range 1000 {
					r.replace(configScope("dev"), "db-password", "db-password", "api-key-1")
				}
			},
			wantSize: 3,
			redacted: []string{"git-token-value", "db-password", "api-key-1"},
		},
		{
			name: "a new secret on every select: current and previous kept, older dropped",
			do: func(r *redactor) {
				for i := range 1000 {
					r.replace(configScope("dev"), fmt.Sprintf("password-%04d", i))
				}
			},
			wantSize: 3,
			redacted: []string{"git-token-value", "password-0999", "password-0998"},
			kept:     []string{"password-0997", "password-0000"},
		},
		{
			name: "repeating the current set does not push out the previous one",
			do: func(r *redactor) {
				r.replace(configScope("dev"), "first-secret")
				r.replace(configScope("dev"), "second-secret")
				r.replace(configScope("dev"), "second-secret")
			},
			wantSize: 3,
			redacted: []string{"first-secret", "second-secret"},
		},
		{
			name: "stacks and outputs are separate scopes",
			do: func(r *redactor) {
				for i := range 100 {
					r.replace(configScope("dev"), "dev-secret")
					r.replace(configScope("prod"), "prod-secret")
					r.replace(outputsScope("dev"), fmt.Sprintf("output-%03d", i))
				}
			},
			wantSize: 5,
			redacted: []string{"dev-secret", "prod-secret", "output-099", "output-098"},
			kept:     []string{"output-097"},
		},
		{
			name: "permanent values survive every replacement and are deduped",
			do: func(r *redactor) {
				for range 1000 {
					r.add("git-token-value", "env-secret")
					r.replace(configScope("dev"), "git-token-value")
					r.replace(configScope("dev"))
				}
			},
			wantSize: 2,
			redacted: []string{"git-token-value", "env-secret"},
		},
		{
			name: "short values are never redacted",
			do: func(r *redactor) {
				r.add("yes")
				r.replace(configScope("dev"), "1", "abc")
			},
			wantSize: 1,
			kept:     []string{"yes", "abc"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRedactor()
			r.add("git-token-value")
			tt.do(r)
			if got := r.size(); got != tt.wantSize {
				t.Fatalf("size = %d, want %d", got, tt.wantSize)
			}
			for _, v := range tt.redacted {
				if got := r.redact("x " + v + " y"); got != "x [secret] y" {
					t.Errorf("redact(%q) = %q, want it redacted", v, got)
				}
			}
			for _, v := range tt.kept {
				if got := r.redact("x " + v + " y"); got != "x "+v+" y" {
					t.Errorf("redact(%q) = %q, want it left alone", v, got)
				}
			}
		})
	}
}

func TestRedactorLongestFirst(t *testing.T) {
	r := newRedactor()
	r.add("abcd")
	r.replace(configScope("dev"), "abcdefgh")
	if got := r.redact("abcdefgh and abcd"); got != "[secret] and [secret]" {
		t.Fatalf("redact = %q", got)
	}
}

// TestRedactorSummarizeRedactsBeforeTheCap: a secret that the message cap
// would cut leaves no part of it visible.
func TestRedactorSummarizeRedactsBeforeTheCap(t *testing.T) {
	secret := strings.Repeat("s3cr3t-", 100) // 700 bytes
	r := newRedactor()
	r.add(secret)
	for _, at := range []int{maxMessage - 600, maxMessage - 1, maxMessage - 12} {
		// The summary drops "error: ": the secret starts at byte at.
		err := errors.New("error: " + strings.Repeat("p", at) + secret + " tail")
		got := r.summarize(err)
		// Any 12 bytes of the secret hold "s3cr3t"; the marker itself may
		// be cut when it starts right before the cap.
		if strings.Contains(got, "s3cr3t") || (at+len("[secret]") <= maxMessage && !strings.Contains(got, "[secret]")) {
			t.Errorf("secret at %d: summary %q…%q", at, got[:40], got[max(0, len(got)-60):])
		}
	}
}

func TestSecretLeaves(t *testing.T) {
	tests := []struct {
		value any
		want  []string
	}{
		{"a-secret", []string{"a-secret"}},
		{float64(123456789012345), []string{"123456789012345"}},
		{true, []string{"true"}},
		{map[string]any{"k": "leaf-value"}, []string{`{"k":"leaf-value"}`, "leaf-value"}},
		{[]any{"one-value", float64(42)}, []string{`["one-value",42]`, "one-value", "42"}},
		{nil, nil},
	}
	for _, tt := range tests {
		if got := secretLeaves(tt.value); fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("secretLeaves(%#v) = %q, want %q", tt.value, got, tt.want)
		}
	}
}

// TestRedactorCutSecret: the start of a secret that the engine shortened with
// an ellipsis is redacted; text merely ending like a short start is kept.
func TestRedactorCutSecret(t *testing.T) {
	r := newRedactor()
	r.add("QxWDiudLdqcdIuhR4C1oDJZMbVcibw1P")
	for in, want := range map[string]string{
		`    echoed: "QxWDiudLdqcdIuhR…`:                         `    echoed: "[secret]…`,
		`key QxWDiudLdq... and QxWDiudLdqcdIuhR4C1oDJZMbVcibw1P`: `key [secret]... and [secret]`,
		`short QxWD… stays`:                                      `short QxWD… stays`,
		`no ellipsis QxWDiudLdqcd`:                               `no ellipsis QxWDiudLdqcd`,
	} {
		if got := r.redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}
