package agent

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
	"github.com/stackflow-io/stackflow/operator/internal/gitremote"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/hostile"
)

// hostileCheckoutServer is a checkoutServer whose source is srv, with an SSH
// key and srv's host key for an SSH server.
func hostileCheckoutServer(t *testing.T, srv *hostile.Server) *Server {
	s := checkoutServer(t, srv.URL)
	if srv.KnownHosts != "" {
		s.source.GitAuth = gitauth.Credentials{SSHPrivateKey: gitrepo.NewSSHKey(t).PrivateKey, KnownHosts: srv.KnownHosts}
	}
	return s
}

// TestCheckoutFromHostileServers: a checkout from a git server that never
// answers, answers a byte a second, or advertises references for ever (over
// SSH and HTTP) fails within the agent's limits with a message naming the
// server and what ran out. Before, a silent SSH server held the checkout past
// --prepare-timeout: go-git's SSH handshake has no deadline.
func TestCheckoutFromHostileServers(t *testing.T) {
	const ref = "0123456789abcdef0123456789abcdef01234567"
	for _, secure := range []bool{true, false} {
		for _, b := range hostile.Behaviours {
			name := "http/" + string(b)
			if secure {
				name = "ssh/" + string(b)
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				srv := hostile.HTTP(t, b, false)
				if secure {
					srv = hostile.SSH(t, b)
				}
				s := hostileCheckoutServer(t, srv)
				s.prepareTimeout = 6 * time.Second
				s.source.GitLimits = gitremote.Limits{IdleTimeout: 2 * time.Second, MaxBytes: 1 << 20}
				start := time.Now()
				st := endedCheckout(t, s, &agentv1.CheckoutRequest{GitRef: ref})
				t.Logf("%s after %s: %s", st.GetState(), time.Since(start).Round(time.Millisecond), st.GetMessage())
				want := map[hostile.Behaviour]string{hostile.Silent: "sent nothing for 2s", hostile.Drip: "did not finish within 6s (--prepare-timeout)",
					hostile.EndlessRefs: "sent more than 1 MiB"}[b]
				if st.GetState() != agentv1.CheckoutState_CHECKOUT_STATE_FAILED || !strings.Contains(st.GetMessage(), want) || !strings.Contains(st.GetMessage(), srv.Addr) {
					t.Fatalf("checkout = %v; want failed, naming %s and %q", st, srv.Addr, want)
				}
			})
		}
	}
}

// TestCheckoutOfAnotherRefIsNotHeld: while a checkout waits on an SSH server
// that never answers (with a preparation timeout far away), a Checkout of
// another revision cancels it and is answered. Before, the cancelled
// checkout's SSH handshake ignored its context and the new Checkout waited
// for it for as long as the server held the connection.
func TestCheckoutOfAnotherRefIsNotHeld(t *testing.T) {
	srv := hostile.SSH(t, hostile.Silent)
	s := hostileCheckoutServer(t, srv)
	s.prepareTimeout = time.Hour
	s.source.GitLimits = gitremote.Limits{IdleTimeout: time.Hour}
	if _, err := s.Checkout(context.Background(), &agentv1.CheckoutRequest{GitRef: "0123456789abcdef0123456789abcdef01234567"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); srv.Accepted() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first checkout never reached the server")
		}
	}
	answered := make(chan error, 1)
	go func() {
		_, err := s.Checkout(context.Background(), &agentv1.CheckoutRequest{GitRef: "fedcba9876543210fedcba9876543210fedcba98"})
		answered <- err
	}()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("the second Checkout: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the second Checkout is still held by the first a minute later")
	}
	s.cancelAll()
}

// TestCheckoutRefusesAnAppOfAnotherHost: an agent exchanges a GitHub App's
// token only with GitHub.com's API or a host of its --github-api-hosts,
// whoever wrote the Workspace: a hand-written one naming another host fails
// the checkout before anything is sent. Before, the agent checked the
// apiURL's form only.
func TestCheckoutRefusesAnAppOfAnotherHost(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var reached atomic.Bool
	go func() {
		if c, err := l.Accept(); err == nil {
			reached.Store(true)
			c.Close()
		}
	}()
	s := checkoutServer(t, "https://git.example/repo.git")
	s.source.GitAuth = gitauth.Credentials{GitHubApp: &gitauth.GitHubApp{AppID: "1", InstallationID: "2", PrivateKey: "unused", APIURL: "https://" + l.Addr().String()}}
	st := endedCheckout(t, s, &agentv1.CheckoutRequest{GitRef: "release"})
	if st.GetState() != agentv1.CheckoutState_CHECKOUT_STATE_FAILED || !strings.Contains(st.GetMessage(), "is not one Stackflow may reach for GitHub Apps") {
		t.Fatalf("checkout = %v; want it refused for the apiURL's host", st)
	}
	if reached.Load() {
		t.Fatal("the agent connected to the host it refused")
	}
}
