package stackcache

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Notifier wakes waiters on a key (a Stack's namespace/name) when it
// changes. Only keys someone waits on hold memory: a change closes and drops
// the key's channel, the next waiter makes a new one.
type Notifier struct {
	mu      sync.Mutex
	waiters map[types.NamespacedName]chan struct{}
}

// NewNotifier returns an empty Notifier.
func NewNotifier() *Notifier {
	return &Notifier{waiters: map[types.NamespacedName]chan struct{}{}}
}

// Changed returns a channel closed at the key's next change. Take it before
// reading the state it guards, so no change is missed in between.
func (n *Notifier) Changed(key types.NamespacedName) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch, ok := n.waiters[key]
	if !ok {
		ch = make(chan struct{})
		n.waiters[key] = ch
	}
	return ch
}

// Notify wakes the key's waiters.
func (n *Notifier) Notify(key types.NamespacedName) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ch, ok := n.waiters[key]; ok {
		close(ch)
		delete(n.waiters, key)
	}
}

// Waiting is how many keys have waiters (for tests and metrics).
func (n *Notifier) Waiting() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.waiters)
}
