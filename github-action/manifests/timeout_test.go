package manifests

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stackflow-io/stackflow/github-action/gitcli"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

// silentServer accepts connections and never answers: a git server that
// hangs. It counts the connections their client has closed.
type silentServer struct {
	ln       net.Listener
	mu       sync.Mutex
	conns    []net.Conn
	accepted int
	gone     int
}

func newSilentServer(t *testing.T) *silentServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silentServer{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.accepted++
			s.mu.Unlock()
			go func() {
				_, _ = io.Copy(io.Discard, c) // returns when the client closes
				s.mu.Lock()
				s.gone++
				s.mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			_ = c.Close()
		}
	})
	return s
}

func (s *silentServer) URL() string { return "http://" + s.ln.Addr().String() }

// clientsGone waits (up to limit) until a client connected and every client
// closed its connection: the git processes that held them are gone.
func (s *silentServer) clientsGone(t *testing.T, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		s.mu.Lock()
		accepted, gone := s.accepted, s.gone
		s.mu.Unlock()
		if accepted > 0 && gone == accepted {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, %d of %d connections to the silent server are still open: a git process outlived its timeout", limit, accepted-gone, accepted)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCloneTimeout: a program repository on a server that accepts the
// connection and never answers fails its Stack within git-timeout, with a
// message saying so, and leaves no git process holding the connection.
func TestCloneTimeout(t *testing.T) {
	silent := newSilentServer(t)
	const timeout = 2 * time.Second
	c := hostile(t, "hung", "  projectRepo: "+silent.URL()+"/app.git\n  commit: "+sha1+"\n")
	start := time.Now()
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		var cleanup func()
		_, cleanup, err = Plan(context.Background(), c, Tree{}, PlanOptions{AllowLoopbackHTTP: true, TempDir: t.TempDir(), GitTimeout: timeout})
		cleanup()
	}()
	select {
	case <-done:
	case <-time.After(timeout + 30*time.Second):
		t.Fatal("the clone from a server that never answers is still running")
	}
	var te *gitcli.TimeoutError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "fetch commit "+sha1[:7]+" of "+silent.URL()+"/app.git: git fetch did not finish within 2s (the git-timeout input)") {
		t.Fatalf("error %v", err)
	}
	if d := time.Since(start); d > timeout+gitcli.WaitDelay+5*time.Second {
		t.Errorf("took %s", d)
	}
	silent.clientsGone(t, 10*time.Second)
}

// TestFetchBaseTimeout: a shallow checkout lacking the base commit, whose
// origin never answers, fails to load within git-timeout with a message
// saying so.
func TestFetchBaseTimeout(t *testing.T) {
	silent := newSilentServer(t)
	repo := gitrepo.New(t)
	repo.Commit(t, "head", map[string]string{"stacks/a.yaml": "x: 1\n"})
	if _, err := (gitcli.Cmd{Dir: repo.Work}).Output(context.Background(), "remote", "set-url", "origin", silent.URL()+"/manifests.git"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Load(context.Background(), repo.Work, "stacks", sha1, Origin{Timeout: 2 * time.Second})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "commit "+sha1[:7]+" is not in "+repo.Work+" and fetching it failed: git fetch did not finish within 2s (the git-timeout input)") {
			t.Fatalf("error %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("the fetch from a server that never answers is still running")
	}
	silent.clientsGone(t, 10*time.Second)
}

// TestOriginToken: the base commit is fetched with the workflow's token
// when origin is on one of the token hosts (a checkout with
// persist-credentials: false keeps none), replacing any header the checkout
// stored; elsewhere without it.
func TestOriginToken(t *testing.T) {
	const token = "ghs_originT0ken"
	repo := gitrepo.New(t)
	g := gitcli.Cmd{Dir: repo.Work}
	ctx := context.Background()
	for _, tt := range []struct {
		origin string
		want   bool
	}{
		{"https://github.example/acme/infra.git", true},
		{"https://GitHub.example:443/acme/infra", true},
		{"https://elsewhere.example/acme/infra.git", false},
		{"http://github.example/acme/infra.git", false},
	} {
		if _, err := g.Output(ctx, "remote", "set-url", "origin", tt.origin); err != nil {
			t.Fatal(err)
		}
		env := strings.Join(originEnviron(ctx, g, Origin{Token: token, TokenHosts: []string{"github.example"}}), "\n")
		header := "GIT_CONFIG_VALUE_1=Authorization: Basic " + basicAuth(token)
		if got := strings.Contains(env, header) && strings.Contains(env, "\nGIT_CONFIG_VALUE_0=\n"); got != tt.want {
			t.Errorf("origin %s: token sent %v, want %v", tt.origin, got, tt.want)
		}
		if strings.Contains(env, token) || !strings.Contains(env, "GIT_TERMINAL_PROMPT=0") {
			t.Errorf("origin %s: environment %q", tt.origin, env)
		}
	}
}
