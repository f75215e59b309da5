package revision

import (
	"strings"
	"testing"
)

func TestShort(t *testing.T) {
	const sha = "5f3c2a1b9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a"
	for _, tc := range []struct{ in, want string }{
		{sha, "5f3c2a1"},
		{strings.ToUpper(sha), "5F3C2A1"},
		{"5f3c2a1", "5f3c2a1"},
		{"5f3c2a1b", "5f3c2a1"},
		{"main@sha1:" + sha, "main@sha1:5f3c2a1"},
		{"sha256:47d369d79bc511135a6e64e0544432ea246b570a433f0e8338d23ad8e448ee08", "sha256:47d369d"},
		{"release-2026-12", "release-2026-12"},
		{"feature/deadbeefcafe", "feature/deadbeefcafe"}, // a branch, not a SHA
		{"v1.2.3", "v1.2.3"},
		{"refs:tags", "refs:tags"},
		{"", ""},
	} {
		if got := Short(tc.in); got != tc.want {
			t.Errorf("Short(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzShort: Short never lengthens, returns a prefix-preserving form of its
// input, and is idempotent.
func FuzzShort(f *testing.F) {
	for _, s := range []string{"5f3c2a1b9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a", "main@sha1:5f3c2a1b9d8e7f6a", "sha256:abc", ":", "a:b:cdef0123456789", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := Short(in)
		if len(out) > len(in) {
			t.Fatalf("Short(%q) = %q is longer", in, out)
		}
		if Short(out) != out {
			t.Fatalf("Short is not idempotent: %q → %q → %q", in, out, Short(out))
		}
		i := strings.LastIndexByte(out, ':')
		if !strings.HasPrefix(in, out[:i+1]) || !strings.HasPrefix(in[i+1:], out[i+1:]) {
			t.Fatalf("Short(%q) = %q is not the input's prefix and a prefix of its digest", in, out)
		}
	})
}
