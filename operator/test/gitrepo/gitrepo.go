// Package gitrepo makes real git repositories on disk for tests: a bare
// repository (the "remote" that operators and agents fetch from) and a working
// clone that commits and pushes to it with the git CLI.
package gitrepo

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Repo is a bare repository and a working clone of it.
type Repo struct {
	Bare string
	Work string
}

// New creates an empty bare repository with a default branch "main".
func New(t testing.TB) *Repo {
	t.Helper()
	root := t.TempDir()
	r := &Repo{Bare: filepath.Join(root, "remote.git"), Work: filepath.Join(root, "work")}
	run(t, root, "init", "-q", "--bare", "-b", "main", r.Bare)
	run(t, root, "init", "-q", "-b", "main", r.Work)
	run(t, r.Work, "remote", "add", "origin", r.Bare)
	return r
}

// URL is the bare repository's file:// URL.
func (r *Repo) URL() string { return "file://" + r.Bare }

// Commit writes files (path → content; empty content deletes the file) on the
// current branch, commits and pushes, and returns the commit SHA.
func (r *Repo) Commit(t testing.TB, message string, files map[string]string) string {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(r.Work, name)
		if content == "" {
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, r.Work, "add", "-A")
	run(t, r.Work, "commit", "-q", "--allow-empty", "-m", message)
	branch := run(t, r.Work, "rev-parse", "--abbrev-ref", "HEAD")
	run(t, r.Work, "push", "-q", "origin", branch)
	return run(t, r.Work, "rev-parse", "HEAD")
}

// Branch switches the working clone to a new branch from the current commit.
func (r *Repo) Branch(t testing.TB, name string) {
	t.Helper()
	run(t, r.Work, "checkout", "-q", "-b", name)
}

func run(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=stackflow-test", "GIT_AUTHOR_EMAIL=test@stackflow.invalid",
		"GIT_COMMITTER_NAME=stackflow-test", "GIT_COMMITTER_EMAIL=test@stackflow.invalid", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}
