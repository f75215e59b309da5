package agentclient

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestNeedsRead(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		have bool
		now  time.Time
		want bool
	}{
		{"nothing read yet", false, t0, true},
		{"fresh", true, t0.Add(59 * time.Second), false},
		{"refresh due", true, t0.Add(time.Minute), true},
		{"clock went back", true, t0.Add(-time.Second), true},
	}
	for _, tt := range cases {
		if got := needsRead(tt.have, t0, tt.now, time.Minute); got != tt.want {
			t.Errorf("%s: needsRead = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestFileTokenFollowsRotation: a token rewritten by the kubelet is used once
// the refresh interval has passed; an unreadable file keeps the last token;
// errors name the file and never a token.
func TestFileTokenFollowsRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	f := &FileToken{Path: path, Now: func() time.Time { return now }}

	if _, err := f.Token(); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("missing file: err = %v, want one naming %s", err, path)
	}
	if err := os.WriteFile(path, []byte("  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Token(); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty file: err = %v", err)
	}
	write := func(tok string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(want string) {
		t.Helper()
		got, err := f.Token()
		if err != nil || got != want {
			t.Fatalf("Token() = %q, %v; want %q", got, err, want)
		}
	}
	write("first")
	expect("first")
	write("second")
	now = now.Add(30 * time.Second)
	expect("first") // within the refresh interval
	now = now.Add(31 * time.Second)
	expect("second")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	expect("second") // the last token, while the file is briefly missing
}
