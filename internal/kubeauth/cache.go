package kubeauth

import (
	"container/list"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// key is a cache key: the SHA-256 of a token, or of a canonical encoding of a
// user and what it asks for.
type key [32]byte

// CacheStats counts what one cache did since the Authorizer was made.
type CacheStats struct {
	// Hits are answers served from the cache.
	Hits uint64
	// Misses are lookups that found nothing usable (absent or expired) and
	// waited for a review (their own, or one already in flight).
	Misses uint64
	// Expired are the misses that found an entry past its time.
	Expired uint64
	// Evictions are entries dropped, least recently used first, to stay
	// within MaxEntries.
	Evictions uint64
	// Entries is the number of entries held now (some may have expired).
	Entries int
	// Refreshes are reviews started in the background by a hit past the
	// entry's refresh time (Options.RefreshAhead); no caller waited.
	Refreshes uint64
	// Reviews is the number of review requests sent to the API server:
	// Allowed + Denied + Errors. A miss that joined a review already in
	// flight sends none.
	Reviews uint64
	// Allowed counts reviews that authenticated the token (token cache) or
	// allowed the access (access cache).
	Allowed uint64
	// Denied counts reviews that rejected the token or denied the access.
	Denied uint64
	// Errors counts reviews that failed to get an answer; they are not
	// cached.
	Errors uint64
}

// Stats is the state of both caches.
type Stats struct {
	// Token is the TokenReview cache.
	Token CacheStats
	// Access is the SubjectAccessReview cache.
	Access CacheStats
}

type entry[V any] struct {
	key     key
	val     V
	expires time.Time
	// refreshAt, when set, is when a hit starts a review in the background
	// (refresh ahead), so callers rarely wait for one at expiry.
	refreshAt time.Time
}

// cache is a least-recently-used map with a deadline on each entry, safe for
// concurrent use. A review for a key missing from it runs once however many
// callers ask for the key at the same time.
type cache[V any] struct {
	max int

	mu       sync.Mutex
	ll       *list.List // front is most recently used
	m        map[key]*list.Element
	inflight map[key]*call[V]

	hits, misses, expired, evictions, refreshes atomic.Uint64
	allowed, denied, errors                     atomic.Uint64
}

type call[V any] struct {
	done chan struct{}
	val  V
	err  error
}

func newCache[V any](max int) *cache[V] {
	return &cache[V]{max: max, ll: list.New(), m: map[key]*list.Element{}, inflight: map[key]*call[V]{}}
}

// get returns the value for k unless it is absent or expired at now, counting
// a hit or a miss.
func (c *cache[V]) get(k key, now time.Time) (V, bool) {
	v, ok, _ := c.lookup(k, now)
	return v, ok
}

// lookup is get that also says whether the hit is due for a refresh ahead
// of its expiry (its refreshAt has passed and no review is in flight).
func (c *cache[V]) lookup(k key, now time.Time) (V, bool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[k]; ok {
		e := el.Value.(*entry[V])
		if now.Before(e.expires) {
			c.ll.MoveToFront(el)
			c.hits.Add(1)
			_, busy := c.inflight[k]
			return e.val, true, !e.refreshAt.IsZero() && !now.Before(e.refreshAt) && !busy
		}
		c.ll.Remove(el)
		delete(c.m, k)
		c.expired.Add(1)
	}
	c.misses.Add(1)
	var zero V
	return zero, false, false
}

// add stores v under k until expires, evicting the least recently used entries
// beyond max.
func (c *cache[V]) add(k key, v V, expires time.Time) { c.addRefreshing(k, v, expires, time.Time{}) }

// addRefreshing is add with a time from which hits refresh the entry in the
// background (zero: never).
func (c *cache[V]) addRefreshing(k key, v V, expires, refreshAt time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[k]; ok {
		e := el.Value.(*entry[V])
		e.val, e.expires, e.refreshAt = v, expires, refreshAt
		c.ll.MoveToFront(el)
		return
	}
	c.m[k] = c.ll.PushFront(&entry[V]{key: k, val: v, expires: expires, refreshAt: refreshAt})
	for c.ll.Len() > c.max {
		el := c.ll.Back()
		c.ll.Remove(el)
		delete(c.m, el.Value.(*entry[V]).key)
		c.evictions.Add(1)
	}
}

// do runs review for k once for all callers asking at the same time; review
// stores its answer with add before do forgets the call. The
// review runs on its own goroutine with ctx's values but not its cancellation
// (bounded by timeout), so one caller giving up does not fail the others; each
// caller stops waiting when its own ctx ends.
func (c *cache[V]) do(ctx context.Context, k key, now time.Time, timeout time.Duration, review func(context.Context) (V, error)) (V, error) {
	c.mu.Lock()
	// A review that finished since get missed has stored its answer.
	if el, ok := c.m[k]; ok && now.Before(el.Value.(*entry[V]).expires) {
		c.mu.Unlock()
		return el.Value.(*entry[V]).val, nil
	}
	cl, ok := c.inflight[k]
	if !ok {
		cl = c.start(ctx, k, timeout, review)
	}
	c.mu.Unlock()
	select {
	case <-cl.done:
		return cl.val, cl.err
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}

// refresh starts review for k in the background, unless one is in flight;
// nobody waits for it. The review stores its answer (or, failing, leaves the
// entry to expire), as for do.
func (c *cache[V]) refresh(ctx context.Context, k key, timeout time.Duration, review func(context.Context) (V, error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.inflight[k]; ok {
		return
	}
	c.refreshes.Add(1)
	c.start(ctx, k, timeout, review)
}

// start runs review for k on its own goroutine, with ctx's values but not
// its cancellation, bounded by timeout. The caller holds c.mu.
func (c *cache[V]) start(ctx context.Context, k key, timeout time.Duration, review func(context.Context) (V, error)) *call[V] {
	cl := &call[V]{done: make(chan struct{})}
	c.inflight[k] = cl
	go func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		cl.val, cl.err = review(rctx)
		c.mu.Lock()
		delete(c.inflight, k)
		c.mu.Unlock()
		close(cl.done)
	}()
	return cl
}

func (c *cache[V]) stats() CacheStats {
	c.mu.Lock()
	n := c.ll.Len()
	c.mu.Unlock()
	s := CacheStats{
		Hits: c.hits.Load(), Misses: c.misses.Load(), Expired: c.expired.Load(),
		Evictions: c.evictions.Load(), Entries: n, Refreshes: c.refreshes.Load(),
		Allowed: c.allowed.Load(), Denied: c.denied.Load(), Errors: c.errors.Load(),
	}
	s.Reviews = s.Allowed + s.Denied + s.Errors
	return s
}
