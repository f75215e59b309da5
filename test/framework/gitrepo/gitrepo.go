// Package gitrepo makes real git repositories on disk for tests: a bare
// repository (the "remote" that operators and agents fetch from) and a working
// clone that commits and pushes to it with the git CLI.
package gitrepo

import (
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// NewIn creates an empty bare repository root/name (so that an HTTPServer
// of root serves it at /name) with a default branch "main", and a working
// clone in a temporary directory.
func NewIn(t testing.TB, root, name string) *Repo {
	t.Helper()
	r := &Repo{Bare: filepath.Join(root, name), Work: filepath.Join(t.TempDir(), "work")}
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

// HTTPServer serves bare repositories with git's smart HTTP protocol (git
// http-backend), on an address chosen before it serves, so a test can point
// a Stack at it while nothing listens yet (a network outage) and start it
// later.
type HTTPServer struct {
	// Addr is the address it serves (or will serve) on, loopback unless
	// NewHTTPServerAt said otherwise.
	Addr string
	// Authorize, when set before Start, requires HTTP basic auth: a request
	// whose user and password it refuses gets 401 with a Basic challenge
	// (as GitHub answers), so a git client retries with its credentials.
	Authorize func(user, password string) bool
	root      string
	srv       *http.Server
}

// NewHTTPServer reserves a loopback port for the repositories under root
// (each served at http://Addr/<name>, for root/<name>).
func NewHTTPServer(t testing.TB, root string) *HTTPServer {
	t.Helper()
	return NewHTTPServerAt(t, root, "127.0.0.1")
}

// NewHTTPServerAt is NewHTTPServer on a port of the address ip (e.g. the
// host's address on a test cluster's pod network, which pods reach).
func NewHTTPServerAt(t testing.TB, root, ip string) *HTTPServer {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	h := &HTTPServer{Addr: addr, root: root}
	t.Cleanup(h.Stop)
	return h
}

// Start serves until Stop.
func (h *HTTPServer) Start(t testing.TB) {
	t.Helper()
	backend, err := Handler(h.root)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", h.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if check := h.Authorize; check != nil {
		next := backend
		backend = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if user, pass, ok := r.BasicAuth(); !ok || !check(user, pass) {
				w.Header().Set("WWW-Authenticate", `Basic realm="gitrepo"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	h.srv = &http.Server{Handler: backend, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = h.srv.Serve(l) }()
}

// Handler serves the bare repositories under root (root/<name> at /<name>)
// with git's smart HTTP protocol, read and push, by running git
// http-backend.
func Handler(root string) (http.Handler, error) {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		return nil, fmt.Errorf("git --exec-path: %w", err)
	}
	return &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(out)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	}, nil
}

// Stop stops serving.
func (h *HTTPServer) Stop() {
	if h.srv != nil {
		_ = h.srv.Close()
	}
}

// HTTPURL is the repository's URL on server h (the bare repository must be
// under h's root).
func (r *Repo) HTTPURL(h *HTTPServer) string {
	rel, _ := filepath.Rel(h.root, r.Bare)
	return "http://" + h.Addr + "/" + filepath.ToSlash(rel)
}

// NewServedHTTP creates a repository name served over HTTP on loopback,
// requiring basic auth that authorize accepts (nil: none).
func NewServedHTTP(t testing.TB, name string, authorize func(user, password string) bool) (*Repo, *HTTPServer) {
	t.Helper()
	root := t.TempDir()
	repo := NewIn(t, root, name)
	srv := NewHTTPServer(t, root)
	srv.Authorize = authorize
	srv.Start(t)
	return repo, srv
}
