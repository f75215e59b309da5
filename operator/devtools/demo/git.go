package demo

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

// gitServer serves the demo's bare repositories on loopback with git's smart
// HTTP protocol, as a git host would: Argo CD and the operator read them
// over HTTP.
type gitServer struct {
	root string
	addr string
	srv  *http.Server
}

func startGitServer(root string) (*gitServer, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	h, err := gitrepo.Handler(root)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &gitServer{root: root, addr: l.Addr().String(), srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = g.srv.Serve(l) }()
	return g, nil
}

func (g *gitServer) Stop() { _ = g.srv.Close() }

// URL is the HTTP URL of the bare repository root/name.
func (g *gitServer) URL(name string) string { return "http://" + g.addr + "/" + name }

// repo is a bare repository served by the git server and a working clone,
// from which the demo commits and pushes (to the bare repository's path, as
// a developer pushing to the host would).
type repo struct {
	bare, work string
}

func newRepo(ctx context.Context, g *gitServer, name, workDir string) (*repo, error) {
	r := &repo{bare: filepath.Join(g.root, name), work: workDir}
	if err := os.MkdirAll(filepath.Dir(workDir), 0o755); err != nil {
		return nil, err
	}
	if err := git(ctx, g.root, "init", "-q", "--bare", "-b", "main", r.bare); err != nil {
		return nil, err
	}
	if err := git(ctx, filepath.Dir(workDir), "clone", "-q", r.bare, workDir); err != nil {
		return nil, err
	}
	return r, nil
}

// commit writes files (relative path → content), commits them with message
// and pushes main; it returns the commit's SHA.
func (r *repo) commit(ctx context.Context, message string, files map[string]string) (string, error) {
	for name, content := range files {
		p := filepath.Join(r.work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	return r.commitAll(ctx, message)
}

// commitAll commits whatever changed in the working clone and pushes main.
func (r *repo) commitAll(ctx context.Context, message string) (string, error) {
	if err := git(ctx, r.work, "add", "-A"); err != nil {
		return "", err
	}
	if err := git(ctx, r.work, "commit", "-q", "-m", message); err != nil {
		return "", err
	}
	if err := git(ctx, r.work, "push", "-q", "origin", "HEAD:main"); err != nil {
		return "", err
	}
	return gitOutput(ctx, r.work, "rev-parse", "HEAD")
}

var gitEnv = []string{
	"GIT_AUTHOR_NAME=stackflow-demo", "GIT_AUTHOR_EMAIL=demo@stackflow.invalid",
	"GIT_COMMITTER_NAME=stackflow-demo", "GIT_COMMITTER_EMAIL=demo@stackflow.invalid",
	"GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
}

func git(ctx context.Context, dir string, args ...string) error {
	_, err := gitOutput(ctx, dir, args...)
	return err
}

func gitOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), gitEnv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}
