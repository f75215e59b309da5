package webhook

import (
	"net/http"
	"sync"
	"time"
)

// maxDeliveryID bounds the X-GitHub-Delivery values remembered (GitHub's are
// 36-character GUIDs).
const maxDeliveryID = 128

// Replay protection defaults: how long and how many accepted deliveries are
// remembered.
const (
	DefaultReplayWindow  = time.Hour
	DefaultMaxDeliveries = 10000
)

// Deliveries remembers accepted deliveries for Window, at most Max of them
// (the oldest forgotten first), by their delivery ID and by the digest of
// their signed payload, so a captured delivery sent again is refused: as is,
// and under a new delivery ID too. GitHub signs the body only, with no
// timestamp, so X-GitHub-Delivery is not covered by the signature; every
// push payload differs from the last (its commits, its repository's pushed_at),
// so a payload seen again is a replay. The memory is the replica's own — a
// replay to another replica, or after the window, is accepted, which costs
// one early branch listing, as a push notes only that a branch should be
// listed again.
type Deliveries struct {
	// Window is how long a delivery is remembered; 0 means
	// DefaultReplayWindow.
	Window time.Duration
	// Max bounds the deliveries remembered; 0 means DefaultMaxDeliveries.
	Max int
	// Now is the clock; default time.Now.
	Now func() time.Time

	mu    sync.Mutex
	seen  map[string]*delivery // by idKey and by payloadKey
	order []*delivery          // in the order reserved, for expiry and the bound
	live  int                  // deliveries remembered (not released, not expired)
}

// delivery is one accepted (or being handled) delivery.
type delivery struct {
	id, digest string
	at         time.Time
	gone       bool // released or expired
}

// Keys of seen: a delivery ID and a payload digest never collide.
func idKey(id string) string          { return "id:" + id }
func payloadKey(digest string) string { return "payload:" + digest }

// reserve records a delivery by its ID and its payload's digest unless
// either is remembered (or being handled); it says which one was, for the
// answer to a replay.
func (d *Deliveries) reserve(id, digest string) (ok bool, replayed string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now
	if d.Now != nil {
		now = d.Now
	}
	t := now()
	d.expire(t, 0)
	if d.seen[idKey(id)] != nil {
		return false, "delivery " + id + " was already accepted (a replay?)"
	}
	if prev := d.seen[payloadKey(digest)]; prev != nil {
		return false, "this payload was already accepted as delivery " + prev.id + " (a replay under a new delivery ID?)"
	}
	d.expire(t, 1) // room for this one
	if d.seen == nil {
		d.seen = map[string]*delivery{}
	}
	e := &delivery{id: id, digest: digest, at: t}
	d.seen[idKey(id)], d.seen[payloadKey(digest)] = e, e
	d.order = append(d.order, e)
	d.live++
	return true, ""
}

// release forgets a delivery that was not accepted: it may be redelivered.
func (d *Deliveries) release(id, digest string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.seen[idKey(id)]; e != nil && e.digest == digest {
		d.forget(e) // its place in order is skipped when it comes first
	}
}

func (d *Deliveries) forget(e *delivery) {
	if e.gone {
		return
	}
	e.gone = true
	delete(d.seen, idKey(e.id))
	delete(d.seen, payloadKey(e.digest))
	d.live--
}

// expire forgets deliveries older than the window and, when room more are
// to be remembered, the oldest beyond the bound.
func (d *Deliveries) expire(now time.Time, room int) {
	window, max := d.Window, d.Max
	if window <= 0 {
		window = DefaultReplayWindow
	}
	if max <= 0 {
		max = DefaultMaxDeliveries
	}
	drop := 0
	for _, e := range d.order {
		if !e.gone && !expired(e.at, now, window) && d.live+room <= max {
			break
		}
		d.forget(e)
		drop++
	}
	d.order = d.order[drop:]
}

// expired decides whether a delivery seen at seen is forgotten at now.
func expired(seen, now time.Time, window time.Duration) bool {
	return now.Sub(seen) >= window
}

// Timeouts bound a webhook connection: a client that sends its headers or
// body slowly, or never reads the answer, is disconnected.
type Timeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

// DefaultTimeouts fit GitHub, which sends a delivery in one go and waits 10
// seconds for the answer.
var DefaultTimeouts = Timeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: 30 * time.Second, Idle: 2 * time.Minute}

// NewServer serves h with the timeouts t.
func NewServer(h http.Handler, t Timeouts) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read, WriteTimeout: t.Write, IdleTimeout: t.Idle}
}
