package gitresolve

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
)

var remoteQueries = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "stackflow_git_remote_queries_total",
	Help: "Remote reference listings (ls-remote) made by the shared resolver, by result.",
}, []string{"result"})

func init() { metrics.Registry.MustRegister(remoteQueries) }

// ListFunc lists a repository's branch heads (branch name → commit).
type ListFunc func(ctx context.Context, url string, auth gitauth.Credentials) (map[string]string, error)

// Shared resolves branches for every Stack of an operator: the references of a
// repository are listed once per (URL, credentials) per TTL, however many
// Stacks and branches need them; concurrent callers share one listing; a
// failing repository is retried with exponential backoff and every caller gets
// its error. Credentials are part of the key, so Stacks with different
// credentials never share a result.
type Shared struct {
	// TTL is how long a listing serves; Invalidate ends it early.
	TTL time.Duration
	// List lists references; default ListBranches.
	List ListFunc
	// Now is the clock; default time.Now.
	Now func() time.Time

	mu        sync.Mutex
	entries   map[string]*entry
	queries   int64
	lastEvict time.Time
	// pushes holds, per repository, the last push token that invalidated its
	// listings (InvalidateOnce).
	pushes map[string]string
}

type entry struct {
	ready   chan struct{} // closed when the listing in flight ends
	heads   map[string]string
	err     error
	at      time.Time
	fails   int
	retryAt time.Time
	stale   bool
	// used is when a caller last got this listing.
	used time.Time
}

// Queries reports how many remote listings were made.
func (s *Shared) Queries() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries
}

func key(url string, auth gitauth.Credentials) string {
	return NormalizeURL(url) + "#" + auth.Fingerprint()
}

// NormalizeURL makes equivalent spellings of a repository URL compare equal
// (scheme-less case, trailing ".git" and "/").
func NormalizeURL(url string) string {
	u := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSpace(url), "/"), ".git")
	return strings.ToLower(u)
}

// Branch returns the head of branch in the repository at url.
func (s *Shared) Branch(ctx context.Context, url, branch string, auth gitauth.Credentials) (string, error) {
	heads, err := s.heads(ctx, url, auth)
	if err != nil {
		return "", err
	}
	name := strings.TrimPrefix(branch, "refs/heads/")
	sha, ok := heads[name]
	if !ok {
		return "", &UnavailableError{Err: fmt.Errorf("branch %s not found in %s", name, url)}
	}
	return sha, nil
}

func (s *Shared) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Shared) heads(ctx context.Context, url string, auth gitauth.Credentials) (map[string]string, error) {
	k := key(url, auth)
	for {
		s.mu.Lock()
		if s.entries == nil {
			s.entries = map[string]*entry{}
		}
		e := s.entries[k]
		now := s.now()
		switch {
		case e != nil && e.ready != nil:
			// A listing is in flight: wait for it.
			ready := e.ready
			s.mu.Unlock()
			select {
			case <-ready:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case e != nil && e.err != nil && now.Before(e.retryAt) && !e.stale:
			err := e.err
			e.used = now
			s.mu.Unlock()
			if IsUnavailable(err) {
				return nil, err
			}
			return nil, &RetryError{Err: err, After: e.retryAt.Sub(now)}
		case e != nil && e.err == nil && now.Sub(e.at) < s.TTL && !e.stale:
			heads := e.heads
			e.used = now
			s.mu.Unlock()
			return heads, nil
		}
		s.evict(now)
		if e == nil {
			e = &entry{}
			s.entries[k] = e
		}
		e.ready = make(chan struct{})
		s.queries++
		s.mu.Unlock()

		list := s.List
		if list == nil {
			list = ListBranches
		}
		heads, err := list(ctx, url, auth)
		result := "ok"
		if err != nil {
			result = "error"
		}
		remoteQueries.WithLabelValues(result).Inc()

		err = classify(err)
		s.mu.Lock()
		e.heads, e.err, e.at, e.stale = heads, err, s.now(), false
		e.used = e.at
		if err != nil {
			e.fails++
			backoff := 5 * time.Second << min(e.fails-1, 7) // 5s … ~10min
			e.retryAt = e.at.Add(backoff)
		} else {
			e.fails = 0
		}
		close(e.ready)
		e.ready = nil
		s.mu.Unlock()
		if err != nil {
			if IsUnavailable(err) {
				return nil, err
			}
			return nil, &RetryError{Err: err, After: e.retryAt.Sub(e.at)}
		}
		return heads, nil
	}
}

// evict drops the listings nobody asked for in evictAfter TTLs (a Stack that
// changed repository or credentials, or was deleted), so the resolver does not
// grow with every repository and credential it ever saw. Called with mu held.
func (s *Shared) evict(now time.Time) {
	if now.Sub(s.lastEvict) < s.TTL {
		return
	}
	s.lastEvict = now
	for k, e := range s.entries {
		if e.ready == nil && now.Sub(e.used) > evictAfter*max(s.TTL, time.Minute) {
			delete(s.entries, k)
		}
	}
}

// evictAfter: a listing unused for this many TTLs (at least minutes) is
// dropped.
const evictAfter = 10

// Len is the number of listings held, for tests.
func (s *Shared) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// Invalidate marks every listing of the repository at url (any credentials) as
// stale, so the next Branch call lists it again: a push webhook's effect.
func (s *Shared) Invalidate(url string) {
	prefix := NormalizeURL(url) + "#"
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.entries {
		if strings.HasPrefix(k, prefix) {
			e.stale = true
		}
	}
}

// InvalidateOnce invalidates the repository's listings for a push identified
// by token, once however many Stacks report the same push: the first Stack
// reconciled after a push gets a fresh listing, the others share it.
func (s *Shared) InvalidateOnce(url, token string) {
	key := NormalizeURL(url)
	s.mu.Lock()
	if s.pushes == nil {
		s.pushes = map[string]string{}
	}
	if s.pushes[key] == token {
		s.mu.Unlock()
		return
	}
	s.pushes[key] = token
	s.mu.Unlock()
	s.Invalidate(url)
}

// Tokens exchanges GitHub App credentials for installation tokens for every
// listing of the operator (their cache).
var Tokens = gitauth.DefaultAppTokens

// ListBranches lists a repository's branch heads with ls-remote semantics.
func ListBranches(ctx context.Context, url string, auth gitauth.Credentials) (map[string]string, error) {
	m, err := auth.Method(ctx, Tokens)
	if err != nil {
		return nil, fmt.Errorf("list references of %s: %w", url, err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	remote := git.NewRemote(memory.NewStorage(), &gitconfig.RemoteConfig{Name: "origin", URLs: []string{url}})
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: m})
	if err != nil {
		return nil, fmt.Errorf("list references of %s: %w", url, err)
	}
	heads := map[string]string{}
	for _, r := range refs {
		if r.Name().IsBranch() {
			heads[r.Name().Short()] = r.Hash().String()
		}
	}
	return heads, nil
}
