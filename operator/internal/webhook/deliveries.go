package webhook

import (
	"net/http"
	"sync"
	"time"
)

// maxDeliveryID bounds the X-GitHub-Delivery values remembered (GitHub's are
// 36-character GUIDs).
const maxDeliveryID = 128

// Replay protection defaults: how long and how many accepted delivery IDs are
// remembered.
const (
	DefaultReplayWindow  = time.Hour
	DefaultMaxDeliveries = 10000
)

// Deliveries remembers the IDs of accepted deliveries for Window, at most
// Max of them (the oldest forgotten first), so a captured delivery sent
// again is refused. GitHub signs the body only, with no timestamp: the
// delivery ID is what tells a replay. The memory is the replica's own — a
// replay to another replica is accepted, which costs one early branch
// listing, as a push notes only that a branch should be listed again.
type Deliveries struct {
	// Window is how long an ID is remembered; 0 means DefaultReplayWindow.
	Window time.Duration
	// Max bounds the IDs remembered; 0 means DefaultMaxDeliveries.
	Max int
	// Now is the clock; default time.Now.
	Now func() time.Time

	mu    sync.Mutex
	seen  map[string]time.Time
	order []seenAt // in the order reserved, for expiry and the bound
}

type seenAt struct {
	id string
	at time.Time
}

// reserve records id unless it is remembered (or being handled): false
// means a replay.
func (d *Deliveries) reserve(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now
	if d.Now != nil {
		now = d.Now
	}
	t := now()
	d.expire(t, 0)
	if _, ok := d.seen[id]; ok {
		return false
	}
	d.expire(t, 1) // room for id
	if d.seen == nil {
		d.seen = map[string]time.Time{}
	}
	d.seen[id] = t
	d.order = append(d.order, seenAt{id, t})
	return true
}

// release forgets id (its delivery was not accepted, and may be redelivered).
func (d *Deliveries) release(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.seen, id) // its entry in order is skipped when it expires
}

// expire forgets IDs older than the window and, when room more are to be
// remembered, the oldest beyond the bound.
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
		// An entry is current while the map holds its time (a released and
		// reserved again ID has a newer entry further on).
		at, ok := d.seen[e.id]
		current := ok && at.Equal(e.at)
		if current && !expired(at, now, window) && len(d.seen)+room <= max {
			break
		}
		if current {
			delete(d.seen, e.id)
		}
		drop++
	}
	d.order = d.order[drop:]
}

// expired decides whether an ID seen at seen is forgotten at now.
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
