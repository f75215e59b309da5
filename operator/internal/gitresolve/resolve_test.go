package gitresolve

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
	"github.com/stackflow-io/stackflow/operator/internal/gitremote"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/hostile"
)

func TestMain(m *testing.M) {
	// The hostile HTTPS servers' CA, trusted before anything loads the
	// system roots.
	os.Setenv("SSL_CERT_FILE", hostile.CAFile(&testing.T{}))
	os.Exit(m.Run())
}

// gate lists fake repositories, holding each listing of a repository whose
// name starts with "slow" until released.
type gate struct {
	mu      sync.Mutex
	heads   map[string]string
	release chan struct{}
	running map[string]int
}

func newGate() *gate {
	return &gate{heads: map[string]string{}, release: make(chan struct{}), running: map[string]int{}}
}

func (g *gate) list(ctx context.Context, url string, _ gitauth.Credentials) (map[string]string, error) {
	g.mu.Lock()
	g.running[url]++
	g.mu.Unlock()
	if strings.HasPrefix(url, "slow") {
		select {
		case <-g.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return map[string]string{"main": g.heads[url]}, nil
}

func (g *gate) set(url, sha string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.heads[url] = sha
}

// woken collects the Stacks a Shared notifies.
type woken struct{ ch chan types.NamespacedName }

func newWoken() *woken { return &woken{ch: make(chan types.NamespacedName, 100)} }

func (w *woken) notify(_ context.Context, n types.NamespacedName) { w.ch <- n }

func (w *woken) next(t *testing.T) types.NamespacedName {
	t.Helper()
	select {
	case n := <-w.ch:
		return n
	case <-time.After(time.Minute):
		t.Fatal("no Stack was woken")
		return types.NamespacedName{}
	}
}

func stackKey(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

// TestResolveNeverWaitsForTheServer: Resolve answers at once while the first
// listing is under way (PendingError), wakes every Stack that asked when it
// ends, then answers from it; past the TTL it answers from the last listing
// while the next is made, and wakes a Stack only if its answer changed.
func TestResolveNeverWaitsForTheServer(t *testing.T) {
	g, w := newGate(), newWoken()
	g.set("slow-repo", "sha-1")
	clock := &fakeClock{t: time.Unix(1000, 0)}
	s := &Shared{TTL: time.Minute, List: g.list, Notify: w.notify, Now: clock.now}
	req := func(name string) Request {
		return Request{URL: "slow-repo", Branch: "main", Stack: stackKey("team-a", name)}
	}
	for _, name := range []string{"a", "b"} {
		if _, err := s.Resolve(context.Background(), req(name)); !IsPending(err) {
			t.Fatalf("%s: want PendingError while the first listing is held, got %v", name, err)
		}
	}
	close(g.release)
	got := map[types.NamespacedName]bool{w.next(t): true, w.next(t): true}
	if !got[stackKey("team-a", "a")] || !got[stackKey("team-a", "b")] {
		t.Fatalf("woken %v, want team-a/a and team-a/b", got)
	}
	if sha, err := s.Resolve(context.Background(), req("a")); err != nil || sha != "sha-1" {
		t.Fatalf("after the listing: %q, %v", sha, err)
	}

	// Past the TTL, unchanged: answered from the last listing, and nobody
	// woken by the new one.
	clock.t = clock.t.Add(2 * time.Minute)
	if sha, err := s.Resolve(context.Background(), req("a")); err != nil || sha != "sha-1" {
		t.Fatalf("past the TTL: %q, %v", sha, err)
	}
	waitListings(t, s, 2)
	// Past the TTL again, changed: b is answered sha-1 then woken for sha-2.
	g.set("slow-repo", "sha-2")
	clock.t = clock.t.Add(2 * time.Minute)
	if sha, _ := s.Resolve(context.Background(), req("b")); sha != "sha-1" {
		t.Fatalf("while listing again: %q, want the last listing's sha-1", sha)
	}
	if n := w.next(t); n != stackKey("team-a", "b") {
		t.Fatalf("woken %v, want team-a/b", n)
	}
	if sha, _ := s.Resolve(context.Background(), req("b")); sha != "sha-2" {
		t.Fatalf("after the new listing: %q, want sha-2", sha)
	}
	select {
	case n := <-w.ch:
		t.Fatalf("%v woken, though its answer did not change", n)
	default:
	}
}

// waitListings waits until n listings have ended.
func waitListings(t *testing.T, s *Shared, n int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		s.mu.Lock()
		busy := false
		for _, e := range s.entries {
			busy = busy || e.listing
		}
		q := s.queries
		s.mu.Unlock()
		if q >= n && !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d listings, %v under way", q, busy)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNamespaceShare: a namespace's repositories that never answer take at
// most its share of the listings; another namespace's repository is still
// listed.
func TestNamespaceShare(t *testing.T) {
	g, w := newGate(), newWoken()
	g.set("fast", "sha-fast")
	s := &Shared{TTL: time.Minute, List: g.list, Notify: w.notify, MaxListings: 3, MaxListingsPerNamespace: 2}
	for i := range 10 {
		_, err := s.Resolve(context.Background(), Request{URL: "slow-" + string(rune('a'+i)), Branch: "main", Stack: stackKey("evil", string(rune('a'+i)))})
		if !IsPending(err) {
			t.Fatal(err)
		}
	}
	evilRunning := func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		n := 0
		for url, c := range g.running {
			if strings.HasPrefix(url, "slow") {
				n += c
			}
		}
		return n
	}
	for deadline := time.Now().Add(time.Minute); evilRunning() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("evil's listings did not start")
		}
	}
	if _, err := s.Resolve(context.Background(), Request{URL: "fast", Branch: "main", Stack: stackKey("good", "app")}); !IsPending(err) {
		t.Fatal(err)
	}
	if n := w.next(t); n != stackKey("good", "app") {
		t.Fatalf("woken %v, want good/app", n)
	}
	if sha, err := s.Resolve(context.Background(), Request{URL: "fast", Branch: "main", Stack: stackKey("good", "app")}); sha != "sha-fast" || err != nil {
		t.Fatalf("%q, %v", sha, err)
	}
	if slow := evilRunning(); slow != 2 {
		t.Fatalf("%d of evil's listings running, want its share of 2", slow)
	}
	close(g.release)
}

// TestHostileRepositories: with the real listing, Stacks whose repositories
// never answer, answer a byte a second or advertise references for ever
// (over SSH and HTTPS) get a bounded error naming the server and what ran
// out, while a Stack of a real repository in another namespace resolves as
// soon as its listing ends. Before, an SSH listing ignored its context, and
// the resolver's waiters had no deadline: such Stacks held the reconcile
// workers for as long as the server held the connection.
func TestHostileRepositories(t *testing.T) {
	limits := gitremote.Limits{Timeout: 5 * time.Second, IdleTimeout: 2 * time.Second, MaxBytes: 1 << 20}
	w := newWoken()
	s := &Shared{TTL: time.Minute, Limits: limits, Notify: w.notify}
	key := gitrepo.NewSSHKey(t)
	type hostileStack struct {
		req  Request
		srv  *hostile.Server
		want string
	}
	var stacks []hostileStack
	for _, b := range hostile.Behaviours {
		want := map[hostile.Behaviour]string{hostile.Silent: "sent nothing", hostile.Drip: "did not finish", hostile.EndlessRefs: "sent more than"}[b]
		ssh := hostile.SSH(t, b)
		https := hostile.HTTP(t, b, true)
		stacks = append(stacks,
			hostileStack{Request{URL: ssh.URL, Branch: "main", Auth: gitauth.Credentials{SSHPrivateKey: key.PrivateKey, KnownHosts: ssh.KnownHosts},
				Stack: stackKey("evil", "ssh-"+string(b))}, ssh, want},
			hostileStack{Request{URL: https.URL, Branch: "main", Stack: stackKey("evil", "https-"+string(b))}, https, want})
	}
	for _, h := range stacks {
		if _, err := s.Resolve(context.Background(), h.req); !IsPending(err) {
			t.Fatalf("%s: %v", h.req.Stack, err)
		}
	}
	repo := gitrepo.New(t)
	sha := repo.Commit(t, "one", map[string]string{"f": "1"})
	good := Request{URL: repo.URL(), Branch: "main", Stack: stackKey("good", "app")}
	if _, err := s.Resolve(context.Background(), good); !IsPending(err) {
		t.Fatal(err)
	}
	pending := map[types.NamespacedName]bool{good.Stack: true}
	for _, h := range stacks {
		pending[h.req.Stack] = true
	}
	start := time.Now()
	for len(pending) > 0 {
		n := w.next(t)
		delete(pending, n)
		if n == good.Stack {
			if got, err := s.Resolve(context.Background(), good); got != sha || err != nil {
				t.Fatalf("good/app: %q, %v", got, err)
			}
			t.Logf("good/app resolved after %s, %d hostile listings still under way", time.Since(start).Round(time.Millisecond), len(pending))
		}
	}
	for _, h := range stacks {
		_, err := s.Resolve(context.Background(), h.req)
		var le *gitremote.LimitError
		if !errors.As(err, &le) || !strings.Contains(err.Error(), h.want) || !strings.Contains(err.Error(), h.srv.Addr) {
			t.Errorf("%s: %v; want a limit error naming %s and %q", h.req.Stack, err, h.srv.Addr, h.want)
		}
		if IsUnavailable(err) {
			t.Errorf("%s: a server that may answer later is reported unavailable: %v", h.req.Stack, err)
		}
	}
	t.Logf("every hostile listing ended within %s (limit %s)", time.Since(start).Round(time.Millisecond), limits.Timeout)
}
