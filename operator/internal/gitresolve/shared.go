package gitresolve

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/stackflow-io/stackflow/internal/redact"
	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
	"github.com/stackflow-io/stackflow/operator/internal/gitremote"
)

var (
	remoteQueries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stackflow_git_remote_queries_total",
		Help: "Remote reference listings (ls-remote) made by the shared resolver, by result.",
	}, []string{"result"})
	listingsInFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "stackflow_git_listings_in_flight",
		Help: "Remote reference listings under way or waiting for a slot (--git-listings, --git-listings-per-namespace).",
	})
)

func init() { metrics.Registry.MustRegister(remoteQueries, listingsInFlight) }

// ListFunc lists a repository's branch heads (branch name → commit).
type ListFunc func(ctx context.Context, url string, auth gitauth.Credentials) (map[string]string, error)

// Request asks for the head of a branch on behalf of a Stack.
type Request struct {
	URL, Branch string
	Auth        gitauth.Credentials
	// Stack is who asks: woken (Notify) when a listing changes its answer,
	// and whose namespace's share of the listings a new listing takes.
	Stack types.NamespacedName
}

// Shared resolves branches for every Stack of an operator, off the
// reconcile workers: the references of a repository are listed once per
// (URL, credentials) per TTL, in the background, however many Stacks and
// branches need them; a Stack is answered at once from the last listing (or
// told the first one is under way) and woken when a listing changes its
// answer. A failing repository is retried with exponential backoff and every
// caller gets its error. Credentials are part of the key, so Stacks with
// different credentials never share a result.
//
// Listings run within Limits (gitremote: a silent, slow or endless server
// ends in a bounded error) and at most MaxListings at a time, at most
// MaxListingsPerNamespace of them for the Stacks of one namespace: a tenant
// whose repositories never answer holds its own share of the listings, never
// the reconcile workers, nor the other tenants' share.
type Shared struct {
	// TTL is how long a listing serves; Invalidate ends it early.
	TTL time.Duration
	// List lists references; default ListBranches within Limits.
	List ListFunc
	// Limits bound each listing (ListBranches).
	Limits gitremote.Limits
	// Tokens exchanges GitHub App credentials for installation tokens (and
	// keeps them); default gitauth.DefaultAppTokens.
	Tokens *gitauth.AppTokens
	// MaxListings and MaxListingsPerNamespace bound the listings under way;
	// defaults DefaultMaxListings and DefaultMaxListingsPerNamespace.
	MaxListings, MaxListingsPerNamespace int
	// Notify, when set, wakes a Stack whose answer a finished listing
	// changed; it gives up when ctx (the operator's) ends.
	Notify func(ctx context.Context, stack types.NamespacedName)
	// Now is the clock; default time.Now.
	Now func() time.Time

	mu        sync.Mutex
	entries   map[string]*entry
	queries   int64
	lastEvict time.Time
	// pushes holds, per repository, the last push token that invalidated its
	// listings (InvalidateOnce).
	pushes map[string]string
	// ctx ends the listings when the operator stops (Start).
	ctx     context.Context
	slots   chan struct{}
	nsSlots map[string]chan struct{}
}

// Defaults of --git-listings and --git-listings-per-namespace.
const (
	DefaultMaxListings             = 16
	DefaultMaxListingsPerNamespace = 4
)

type entry struct {
	url  string
	auth gitauth.Credentials
	// ns is the namespace whose share of the listings this repository's
	// listings take: the first asker's.
	ns string

	listing bool
	ready   chan struct{} // closed when the listing in flight ends
	started time.Time

	done    bool // a listing ended: heads or err is its result
	heads   map[string]string
	err     error
	at      time.Time
	fails   int
	backoff time.Duration
	retryAt time.Time
	stale   bool
	// used is when a caller last got this listing.
	used time.Time
	// waiters are the Stacks answered while a listing was under way, with
	// what they were answered: woken when the listing changes it.
	waiters map[types.NamespacedName]answer
}

// answer is what a Stack was told about a branch.
type answer struct {
	branch, sha, err string
	pending          bool
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

// PendingError: the repository's first listing is under way (or waiting for
// a slot); the asking Stack is woken when it ends.
type PendingError struct {
	// Host is the git server (gitremote.Host).
	Host string
}

func (e *PendingError) Error() string {
	return "listing the branches of the git server " + e.Host
}

// IsPending reports a PendingError.
func IsPending(err error) bool {
	var p *PendingError
	return errors.As(err, &p)
}

// Start holds the context that ends the listings when the operator stops (a
// manager Runnable).
func (s *Shared) Start(ctx context.Context) error {
	s.mu.Lock()
	s.ctx = ctx
	s.mu.Unlock()
	<-ctx.Done()
	return nil
}

// NeedLeaderElection: every replica may answer (the reconcilers that ask
// run on the leader).
func (s *Shared) NeedLeaderElection() bool { return false }

func (s *Shared) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Resolve answers at once: the head of the branch from the last listing of
// the repository, or its error, or a PendingError while the first listing
// is under way. A listing past its TTL (or backoff) is made again in the
// background, and the Stack is woken (Notify) if it changes the answer.
func (s *Shared) Resolve(_ context.Context, req Request) (string, error) {
	sha, err, _ := s.resolve(req, false)
	return sha, err
}

// Branch returns the head of branch in the repository at url from a listing
// within its TTL, waiting for one to be made if needed.
func (s *Shared) Branch(ctx context.Context, url, branch string, auth gitauth.Credentials) (string, error) {
	req := Request{URL: url, Branch: branch, Auth: auth}
	sha, err, ready := s.resolve(req, true)
	if ready == nil {
		return sha, err
	}
	select {
	case <-ready:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	// The listing waited for is the answer, however short the TTL.
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[key(url, auth)]
	if e == nil || !e.done {
		return "", fmt.Errorf("the listing of %s was dropped", redact.URLCredentials(url))
	}
	return e.answer(req, s.now(), s.listingBound())
}

// resolve answers req from the repository's listing, starting one when the
// last is past its TTL or backoff. current asks for an answer from a current
// listing only: while one is under way, its ready channel is returned to
// wait on.
func (s *Shared) resolve(req Request, current bool) (string, error, <-chan struct{}) {
	k := key(req.URL, req.Auth)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries == nil {
		s.entries = map[string]*entry{}
	}
	now := s.now()
	s.evict(now)
	e := s.entries[k]
	if e == nil {
		e = &entry{url: req.URL, auth: req.Auth, ns: req.Stack.Namespace}
		s.entries[k] = e
	}
	e.used = now
	fresh := e.fresh(now, s.TTL)
	if !fresh && !e.listing {
		s.start(k, e, now)
	}
	if e.listing && (current || !e.done) {
		if current {
			return "", nil, e.ready
		}
		e.wait(req.Stack, answer{branch: req.Branch, pending: true})
		return "", &PendingError{Host: gitremote.Host(req.URL)}, nil
	}
	sha, err := e.answer(req, now, s.listingBound())
	if !fresh {
		e.wait(req.Stack, answerOf(req.Branch, sha, err))
	}
	return sha, err, nil
}

// fresh: the entry's result serves until its TTL, or its backoff, ends.
func (e *entry) fresh(now time.Time, ttl time.Duration) bool {
	if !e.done || e.stale {
		return false
	}
	if e.err != nil {
		return now.Before(e.retryAt)
	}
	return now.Sub(e.at) < ttl
}

func (e *entry) wait(stack types.NamespacedName, a answer) {
	if stack == (types.NamespacedName{}) {
		return
	}
	if e.waiters == nil {
		e.waiters = map[types.NamespacedName]answer{}
	}
	e.waiters[stack] = a
}

// answer is the branch's head from the entry's last result. A transient
// error says when the caller may look again: at the end of its backoff, or,
// with a listing under way, when that ends at the latest.
func (e *entry) answer(req Request, now time.Time, bound time.Duration) (string, error) {
	if e.err != nil {
		if IsUnavailable(e.err) {
			return "", e.err
		}
		after := e.retryAt.Sub(now)
		if e.listing {
			after = e.started.Add(bound).Sub(now)
		}
		return "", &RetryError{Err: e.err, After: max(after, time.Second), Backoff: e.backoff}
	}
	name := strings.TrimPrefix(req.Branch, "refs/heads/")
	sha, ok := e.heads[name]
	if !ok {
		return "", &UnavailableError{Err: fmt.Errorf("branch %s not found in %s", name, redact.URLCredentials(req.URL))}
	}
	return sha, nil
}

func answerOf(branch, sha string, err error) answer {
	a := answer{branch: branch, sha: sha}
	if err != nil {
		var r *RetryError
		if errors.As(err, &r) {
			err = r.Err // not when to look again, which moves
		}
		a.err = err.Error()
	}
	return a
}

// listingBound is how long a listing may take once it has a slot.
func (s *Shared) listingBound() time.Duration {
	if s.Limits.Timeout > 0 {
		return s.Limits.Timeout
	}
	return gitremote.DefaultListTimeout
}

// start lists the entry's repository in the background (mu held).
func (s *Shared) start(k string, e *entry, now time.Time) {
	e.listing, e.ready, e.started = true, make(chan struct{}), now
	s.queries++
	ctx := s.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	list := s.List
	if list == nil {
		limits := s.Limits
		if limits.Timeout == 0 {
			limits.Timeout = gitremote.DefaultListTimeout
		}
		list = func(ctx context.Context, url string, auth gitauth.Credentials) (map[string]string, error) {
			return ListBranches(ctx, url, auth, s.Tokens, limits)
		}
	}
	url, auth, ns := e.url, e.auth, e.ns
	listingsInFlight.Inc()
	go func() {
		defer listingsInFlight.Dec()
		var heads map[string]string
		release, err := s.acquire(ctx, ns)
		if err == nil {
			s.mu.Lock()
			e.started = s.now() // the bound runs from here
			s.mu.Unlock()
			heads, err = list(ctx, url, auth)
			release()
		}
		result := "ok"
		if err != nil {
			result = "error"
		}
		remoteQueries.WithLabelValues(result).Inc()
		for _, stack := range s.finish(e, heads, classify(err)) {
			if s.Notify != nil {
				s.Notify(ctx, stack)
			}
		}
	}()
}

// finish records a listing's result and returns the Stacks whose answer it
// changed.
func (s *Shared) finish(e *entry, heads map[string]string, err error) []types.NamespacedName {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.heads, e.err, e.at, e.stale, e.done = heads, err, s.now(), false, true
	if err != nil {
		e.fails++
		e.backoff = 5 * time.Second << min(e.fails-1, 7) // 5s … ~10min
		e.retryAt = e.at.Add(e.backoff)
	} else {
		e.fails, e.backoff = 0, 0
	}
	e.listing = false
	close(e.ready)
	var woken []types.NamespacedName
	for stack, was := range e.waiters {
		sha, err := e.answer(Request{URL: e.url, Branch: was.branch}, e.at, 0)
		if was.pending || answerOf(was.branch, sha, err) != was {
			woken = append(woken, stack)
		}
	}
	e.waiters = nil
	return woken
}

// acquire takes a listing slot, and one of ns's share.
func (s *Shared) acquire(ctx context.Context, ns string) (release func(), err error) {
	s.mu.Lock()
	if s.slots == nil {
		s.slots = make(chan struct{}, orDefault(s.MaxListings, DefaultMaxListings))
		s.nsSlots = map[string]chan struct{}{}
	}
	mine := s.nsSlots[ns]
	if mine == nil {
		mine = make(chan struct{}, orDefault(s.MaxListingsPerNamespace, DefaultMaxListingsPerNamespace))
		s.nsSlots[ns] = mine
	}
	all := s.slots
	s.mu.Unlock()
	select {
	case mine <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case all <- struct{}{}:
	case <-ctx.Done():
		<-mine
		return nil, ctx.Err()
	}
	return func() { <-all; <-mine }, nil
}

func orDefault(n, def int) int {
	if n > 0 {
		return n
	}
	return def
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
		if !e.listing && now.Sub(e.used) > evictAfter*max(s.TTL, time.Minute) {
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

// ListBranches lists a repository's branch heads with ls-remote semantics,
// within limits, exchanging GitHub App credentials with tokens (nil:
// gitauth.DefaultAppTokens). Errors name the repository without its user
// info.
func ListBranches(ctx context.Context, url string, auth gitauth.Credentials, tokens *gitauth.AppTokens, limits gitremote.Limits) (map[string]string, error) {
	what := "list references of " + redact.URLCredentials(url)
	if limits.Timeout > 0 {
		// The token exchange (GitHub Apps) counts against the bound too.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limits.Timeout)
		defer cancel()
	}
	m, err := auth.Method(ctx, tokens)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	refs, err := gitremote.List(ctx, url, m, limits)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	heads := map[string]string{}
	for _, r := range refs {
		if r.Name().IsBranch() {
			heads[r.Name().Short()] = r.Hash().String()
		}
	}
	return heads, nil
}
