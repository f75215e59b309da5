package stackcache

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Notifier wakes waiters on a key (a Stack's namespace/name) when it
// changes. Only keys someone waits on right now hold memory: a waiter
// registers with Watch and unregisters with the function Watch returns, the
// last waiter to leave drops the key, and a change closes and drops the
// key's channel (its waiters then register again if they keep waiting). So
// requests that do not wait, and requests for Stacks that never change
// (that do not exist, say), leave nothing behind.
type Notifier struct {
	mu   sync.Mutex
	keys map[types.NamespacedName]*watched
	// peak is the most keys held since keys was last allocated: Go maps
	// never shrink, so an emptied map that once held many keys is replaced
	// to give their memory back.
	peak int
}

// watched is a key's channel and how many waiters hold it.
type watched struct {
	ch      chan struct{}
	waiters int
}

// shrinkAbove is the peak above which an emptied map is reallocated.
const shrinkAbove = 1024

// NewNotifier returns an empty Notifier.
func NewNotifier() *Notifier {
	return &Notifier{keys: map[types.NamespacedName]*watched{}}
}

// Watch returns a channel closed at the key's next change, and the function
// to call once the caller no longer waits on it (it may be called more than
// once). Take the channel before reading the state it guards, so no change
// is missed in between.
func (n *Notifier) Watch(key types.NamespacedName) (<-chan struct{}, func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	w, ok := n.keys[key]
	if !ok {
		w = &watched{ch: make(chan struct{})}
		n.keys[key] = w
		n.peak = max(n.peak, len(n.keys))
	}
	w.waiters++
	var once sync.Once
	return w.ch, func() { once.Do(func() { n.leave(key, w) }) }
}

// leave unregisters one waiter of w; the last one drops the key. A key
// already dropped by a change (or registered anew since) is left alone.
func (n *Notifier) leave(key types.NamespacedName, w *watched) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.keys[key] != w {
		return
	}
	if w.waiters--; w.waiters == 0 {
		n.drop(key)
	}
}

// Notify wakes the key's waiters.
func (n *Notifier) Notify(key types.NamespacedName) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w, ok := n.keys[key]; ok {
		close(w.ch)
		n.drop(key)
	}
}

func (n *Notifier) drop(key types.NamespacedName) {
	delete(n.keys, key)
	if len(n.keys) == 0 && n.peak > shrinkAbove {
		n.keys, n.peak = map[types.NamespacedName]*watched{}, 0
	}
}

// Waiting is how many keys have waiters (for tests and metrics).
func (n *Notifier) Waiting() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.keys)
}
