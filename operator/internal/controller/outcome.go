package controller

import (
	"context"
	"errors"
	"time"
)

// Every reconcile step of every kind ends with nil (go on to the next step)
// or one of these outcomes, which the finisher (finisher.go) turns, in one
// place, into the kind's conditions, observedGeneration, events and requeue:
//   - nil or upToDate: the object is as its spec asks (Ready=True);
//     requeue, when set, is when to look again (a resync, a TTL);
//   - *stallingError: the object cannot progress until something changes
//     (Stalled=True); requeue, when set, is when to look again anyway;
//   - *awaitingError: a person must decide (a plan awaits approval):
//     Ready=False with the reason, neither Reconciling nor Stalled;
//   - *waitingError: something under way will wake the object (an update,
//     a workspace, a prerequisite, a backoff): Reconciling=True (a
//     Workspace says it on Ready alone; an Update on Progressing);
//   - errStale: the object read from the cache is older than the stored
//     one: nothing is written, and the reconcile is redone once the cache
//     has caught up;
//   - errGone: the step released the object's last finalizer: nothing is
//     left to write;
//   - any other error is transient: it is returned and controller-runtime's
//     backoff applies (a Stack says so on Reconciling). A conflict (a write
//     that lost an optimistic-locking race) is an expected outcome of two
//     writers, requeued quietly instead.

type stallingError struct {
	reason, msg string
	requeue     time.Duration
}

func (e *stallingError) Error() string { return e.msg }

// awaitingError: nothing runs until a person decides (a Stack's plan
// awaiting approval): neither progressing nor stalled. A kind without an
// awaiting spelling says it as waiting.
type awaitingError struct {
	reason, msg string
	requeue     time.Duration
}

func (e *awaitingError) Error() string { return e.msg }

type waitingError struct {
	reason, msg string
	requeue     time.Duration
}

func (e *waitingError) Error() string { return e.msg }

// upToDateOutcome ends a reconcile with nothing left to do. msg, when set,
// is the Ready message of kinds whose steps word it (a Workspace's agent).
type upToDateOutcome struct {
	requeue time.Duration
	msg     string
}

func (e *upToDateOutcome) Error() string { return "up to date" }

// upToDate ends a reconcile as Ready, looking again after requeue (0: when
// a watched object changes).
func upToDate(requeue time.Duration) error { return &upToDateOutcome{requeue: requeue} }

// errUpToDate ends a reconcile as Ready with no resync of its own.
var errUpToDate = upToDate(0)

var (
	errStale = errors.New("the cached object is older than the stored one")
	errGone  = errors.New("the object is gone")
)

// step is one reconcile step over a kind's scope S: nil to go on, or the
// outcome that ends the reconcile.
type step[S any] func(ctx context.Context, sc S) error

// runSteps runs steps in order until one ends the reconcile; nil when every
// step went on (the object is up to date).
func runSteps[S any](ctx context.Context, sc S, steps ...step[S]) error {
	for _, st := range steps {
		if err := st(ctx, sc); err != nil {
			return err
		}
	}
	return nil
}
