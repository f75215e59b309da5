package gitresolve

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
	"github.com/stackflow-io/stackflow/operator/internal/gitremote"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// counting lists fake repositories, counting calls per URL and credentials.
type counting struct {
	mu    sync.Mutex
	calls map[string]int
	fail  map[string]error
	delay time.Duration
}

func (c *counting) list(_ context.Context, url string, auth gitauth.Credentials) (map[string]string, error) {
	time.Sleep(c.delay)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[url+"|"+auth.Token]++
	if err := c.fail[url]; err != nil {
		return nil, err
	}
	return map[string]string{"main": "sha-" + url, "release": "rel-" + url}, nil
}

func (c *counting) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.calls {
		n += v
	}
	return n
}

// TestSharedOneListingPerRepositoryPerInterval: 1,000 Stacks on 10
// repositories, resolving concurrently, make 10 remote listings per interval.
func TestSharedOneListingPerRepositoryPerInterval(t *testing.T) {
	fake := &counting{calls: map[string]int{}, delay: 20 * time.Millisecond}
	clock := &fakeClock{t: time.Unix(1000, 0)}
	s := &Shared{TTL: time.Minute, List: fake.list, Now: clock.now}
	resolveAll := func() {
		var wg sync.WaitGroup
		var bad atomic.Int64
		for i := range 1000 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				url := fmt.Sprintf("https://git.example/repo-%d", i%10)
				branch := "main"
				if i%3 == 0 {
					branch = "refs/heads/release"
				}
				sha, err := s.Branch(context.Background(), url, branch, gitauth.Credentials{})
				prefix := "sha-"
				if branch != "main" {
					prefix = "rel-"
				}
				if err != nil || sha != prefix+url {
					bad.Add(1)
				}
			}()
		}
		wg.Wait()
		if bad.Load() > 0 {
			t.Fatalf("%d resolutions were wrong", bad.Load())
		}
	}
	resolveAll()
	if got := fake.total(); got != 10 {
		t.Fatalf("first interval: %d remote listings, want 10", got)
	}
	clock.t = clock.t.Add(30 * time.Second)
	resolveAll()
	if got := fake.total(); got != 10 {
		t.Fatalf("within the interval: %d remote listings, want still 10", got)
	}
	clock.t = clock.t.Add(31 * time.Second)
	resolveAll()
	if got := fake.total(); got != 20 {
		t.Fatalf("next interval: %d remote listings, want 20", got)
	}
	if s.Queries() != 20 {
		t.Fatalf("Queries() = %d", s.Queries())
	}
}

func TestSharedCredentialsAreNotShared(t *testing.T) {
	fake := &counting{calls: map[string]int{}}
	s := &Shared{TTL: time.Minute, List: fake.list}
	for _, tok := range []string{"", "token-a", "token-b", "token-a"} {
		if _, err := s.Branch(context.Background(), "https://git.example/r", "main", gitauth.Credentials{Token: tok}); err != nil {
			t.Fatal(err)
		}
	}
	if fake.calls["https://git.example/r|"] != 1 || fake.calls["https://git.example/r|token-a"] != 1 || fake.calls["https://git.example/r|token-b"] != 1 {
		t.Fatalf("calls = %v, want one listing per distinct credentials", fake.calls)
	}
}

func TestSharedFailureBacksOffPerRepository(t *testing.T) {
	fake := &counting{calls: map[string]int{}, fail: map[string]error{"https://git.example/down": errors.New("connection refused")}}
	clock := &fakeClock{t: time.Unix(1000, 0)}
	s := &Shared{TTL: time.Minute, List: fake.list, Now: clock.now}
	for range 5 {
		_, err := s.Branch(context.Background(), "https://git.example/down", "main", gitauth.Credentials{})
		if err == nil || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("err = %v", err)
		}
	}
	if got := fake.calls["https://git.example/down|"]; got != 1 {
		t.Fatalf("a failing repository was listed %d times within its backoff", got)
	}
	if _, err := s.Branch(context.Background(), "https://git.example/up", "main", gitauth.Credentials{}); err != nil {
		t.Fatalf("another repository suffered from the failing one: %v", err)
	}
	clock.t = clock.t.Add(6 * time.Second)
	_, _ = s.Branch(context.Background(), "https://git.example/down", "main", gitauth.Credentials{})
	if got := fake.calls["https://git.example/down|"]; got != 2 {
		t.Fatalf("after the backoff: %d listings, want 2", got)
	}
	delete(fake.fail, "https://git.example/down")
	clock.t = clock.t.Add(11 * time.Second) // second backoff is 10s
	if _, err := s.Branch(context.Background(), "https://git.example/down", "main", gitauth.Credentials{}); err != nil {
		t.Fatalf("recovered repository: %v", err)
	}
}

func TestSharedInvalidate(t *testing.T) {
	fake := &counting{calls: map[string]int{}}
	s := &Shared{TTL: time.Hour, List: fake.list}
	for range 3 {
		_, _ = s.Branch(context.Background(), "https://git.example/r.git", "main", gitauth.Credentials{Token: "x"})
	}
	s.Invalidate("HTTPS://git.example/r/")
	_, _ = s.Branch(context.Background(), "https://git.example/r.git", "main", gitauth.Credentials{Token: "x"})
	if got := fake.total(); got != 2 {
		t.Fatalf("listings = %d, want 2 (one more after Invalidate)", got)
	}
	if _, err := s.Branch(context.Background(), "https://git.example/r.git", "nope", gitauth.Credentials{Token: "x"}); err == nil || !strings.Contains(err.Error(), "branch nope not found") {
		t.Fatalf("missing branch: %v", err)
	}
}

// TestListBranchesRealRepository lists a real bare repository.
func TestListBranchesRealRepository(t *testing.T) {
	repo := gitrepo.New(t)
	main := repo.Commit(t, "one", map[string]string{"f": "1"})
	repo.Branch(t, "feature")
	feature := repo.Commit(t, "two", map[string]string{"f": "2"})
	heads, err := ListBranches(context.Background(), repo.URL(), gitauth.Credentials{}, nil, gitremote.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if heads["main"] != main || heads["feature"] != feature {
		t.Fatalf("heads = %v, want main=%s feature=%s", heads, main, feature)
	}
	if _, err := ListBranches(context.Background(), "file:///nonexistent.git", gitauth.Credentials{}, nil, gitremote.Limits{}); err == nil {
		t.Fatal("listing a missing repository succeeded")
	}
}

// TestSharedClassifiesEvictsAndInvalidatesOnce: permanent errors are told
// from transient ones (which carry the retry time); listings nobody asks for
// are evicted; one push invalidates a repository once however many Stacks
// report it.
func TestSharedClassifiesEvictsAndInvalidatesOnce(t *testing.T) {
	notFound := fmt.Errorf("list references: %w", transportNotFound)
	fake := &counting{calls: map[string]int{}, fail: map[string]error{"gone": notFound, "down": errors.New("dial tcp: connection refused")}}
	clock := &fakeClock{t: time.Unix(1000, 0)}
	s := &Shared{TTL: time.Minute, List: fake.list, Now: clock.now}
	ctx := context.Background()

	_, err := s.Branch(ctx, "gone", "main", gitauth.Credentials{})
	if !IsUnavailable(err) {
		t.Fatalf("repository not found: %v is not permanent", err)
	}
	_, err = s.Branch(ctx, "down", "main", gitauth.Credentials{})
	if after, ok := RetryAfter(err); IsUnavailable(err) || !ok || after != 5*time.Second {
		t.Fatalf("connection refused: %v (retry %s, %v)", err, after, ok)
	}
	if _, err := s.Branch(ctx, "up", "missing", gitauth.Credentials{}); !IsUnavailable(err) || !strings.Contains(err.Error(), "branch missing not found") {
		t.Fatalf("missing branch: %v", err)
	}

	// Pushes: the first report of a push lists again, later ones share it.
	base := fake.total()
	for range 5 {
		s.InvalidateOnce("up", "push-1")
		if _, err := s.Branch(ctx, "up", "main", gitauth.Credentials{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := fake.total() - base; got != 1 {
		t.Fatalf("one push made %d listings, want 1", got)
	}
	s.InvalidateOnce("up", "push-2")
	if _, err := s.Branch(ctx, "up", "main", gitauth.Credentials{}); err != nil || fake.total()-base != 2 {
		t.Fatalf("a second push did not list again (%v)", err)
	}

	// Eviction: 100 repositories asked once, then only one keeps being used.
	for i := range 100 {
		_, _ = s.Branch(ctx, fmt.Sprintf("repo-%d", i), "main", gitauth.Credentials{Token: "t"})
	}
	if s.Len() < 100 {
		t.Fatalf("%d listings held", s.Len())
	}
	for range 15 {
		clock.t = clock.t.Add(time.Minute + time.Second)
		if _, err := s.Branch(ctx, "up", "main", gitauth.Credentials{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n != 1 {
		t.Fatalf("%d listings held after the others went unused for 15 minutes, want 1", n)
	}
}

var transportNotFound = transport.ErrRepositoryNotFound
