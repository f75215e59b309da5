package images

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestGitSource(t *testing.T) {
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z", "GIT_AUTHOR_DATE=2020-01-01T00:00:00Z")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "f")
	git("commit", "-q", "-m", "one")
	ctx := context.Background()

	for _, tc := range []struct {
		name, epoch string
		want        time.Time
		wantErr     bool
	}{
		{name: "commit time", want: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
		{name: "SOURCE_DATE_EPOCH", epoch: "1700000000", want: time.Unix(1700000000, 0).UTC()},
		{name: "bad SOURCE_DATE_EPOCH", epoch: "yesterday", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := GitSource(ctx, dir, tc.epoch)
			if tc.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !s.Created.Equal(tc.want) {
				t.Errorf("Created %s, want %s", s.Created, tc.want)
			}
			if len(s.Revision) != 40 || !strings.HasPrefix(s.Revision, s.Version) {
				t.Errorf("revision %q, version %q: want a full SHA and its abbreviation", s.Revision, s.Version)
			}
		})
	}

	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("2"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := GitSource(ctx, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(s.Version, "-dirty") {
		t.Errorf("version %q of a modified tree lacks -dirty", s.Version)
	}
	if _, err := GitSource(ctx, t.TempDir(), ""); err == nil {
		t.Error("no error outside a repository")
	}
}
