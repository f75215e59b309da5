package controller

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/stackflow-io/stackflow/internal/redact"
)

// conflictRetry is when a reconcile that lost a write race runs again. The
// write that won usually wakes the object sooner; the delay covers writes
// the controller's predicates do not see (a status patch of a Program, whose
// watch passes spec changes only).
const conflictRetry = time.Second

// staleRetry is when a reconcile that read a stale object from the cache
// runs again: the cache has usually caught up by then.
const staleRetry = time.Second

var reconcileOutcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "stackflow_reconcile_outcomes_total",
	Help: "Reconciles by kind and outcome (ready, waiting, awaiting, stalled, transient, conflict, stale, gone); a failed status write counts as conflict, transient or gone.",
}, []string{"kind", "outcome"})

func init() { metrics.Registry.MustRegister(reconcileOutcomes) }

// spelling is how a kind writes a reconcile's outcome in its status: its
// conditions and observedGeneration. A nil func leaves the status as the
// steps left it (a Program has no conditions; a Workspace's conditions
// outlive a transient error, since Stacks and Updates wait on Ready).
type spelling[T client.Object] struct {
	ready     func(obj T, msg string)
	waiting   func(obj T, reason, msg string)
	stalled   func(obj T, reason, msg string)
	transient func(obj T, err error)
	// awaiting, when set, spells an awaitingError; nil: as waiting.
	awaiting func(obj T, reason, msg string)
}

// finisher ends every reconcile of one kind, the same way for all four:
// the outcome is spelled in the status; the status is written once, as a
// merge patch with optimistic locking (a reconcile that worked from a stale
// copy fails instead of overwriting a newer status, and runs again on the
// stored one); once the status is stored as computed, the events and
// metrics its transitions call for are sent, and the kind's follow-up work
// (hooks) runs; a lost write race is requeued quietly.
//
// Locking is the rule for every kind, the Update included: a reconcile of an
// Update read from a cache that has not seen its last status write (woken by
// its follower or its Workspace meanwhile) would ask the agent again and
// record the run's end a second time — or, with the run evicted from the
// agent, overwrite its result with Aborted.
type finisher[T client.Object] struct {
	// kind labels the outcome metric.
	kind     string
	client   client.Client
	recorder record.EventRecorder
	spell    spelling[T]
	// report sends the events and metrics a change of status from before
	// to after calls for; it runs once per stored change, so a reconcile
	// that lost its write race reports nothing.
	report func(rec record.EventRecorder, before, after T)
}

// finish ends a reconcile of obj (read as base) with outcome: see the
// finisher. hooks run once the status is stored, in order; the first error
// is returned.
func (f *finisher[T]) finish(ctx context.Context, base, obj T, outcome error, hooks ...func(context.Context) error) (ctrl.Result, error) {
	result, err := f.summarize(obj, outcome)
	label := outcomeLabel(outcome)
	defer func() { reconcileOutcomes.WithLabelValues(f.kind, label).Inc() }()
	if errors.Is(outcome, errStale) || errors.Is(outcome, errGone) {
		return result, err
	}
	if !equality.Semantic.DeepEqual(statusOf(base).Interface(), statusOf(obj).Interface()) {
		// The patch's base is the object as this reconcile last stored it
		// (its own finalizer update moved the resourceVersion on) with the
		// status it read: the lock fails on another writer's change only.
		from := obj.DeepCopyObject().(T)
		statusOf(from).Set(statusOf(base))
		patch := client.MergeFromWithOptions(from, client.MergeFromWithOptimisticLock{})
		if perr := f.client.Status().Patch(ctx, obj, patch); perr != nil {
			// The reconcile's own error comes first; an object deleted
			// meanwhile is not an error.
			if err == nil {
				err = client.IgnoreNotFound(perr)
			}
			// The outcome was not stored: it is counted as what becomes of
			// the reconcile (a quiet requeue, a returned error, or nothing
			// for an object gone), never as the outcome it was to record.
			label = writeFailedLabel(err)
			return quiet(ctx, ctrl.Result{}, err)
		}
	}
	if f.report != nil {
		f.report(f.recorder, base, obj)
	}
	for _, hook := range hooks {
		if herr := hook(ctx); herr != nil && err == nil {
			err = herr
		}
	}
	return quiet(ctx, result, err)
}

// summarize spells outcome in obj's status and returns the reconcile's
// result.
func (f *finisher[T]) summarize(obj T, outcome error) (ctrl.Result, error) {
	var done *upToDateOutcome
	var stalling *stallingError
	var waiting *waitingError
	var awaiting *awaitingError
	switch {
	case outcome == nil || errors.As(outcome, &done):
		msg, requeue := "", time.Duration(0)
		if done != nil {
			msg, requeue = done.msg, done.requeue
		}
		if f.spell.ready != nil {
			f.spell.ready(obj, msg)
		}
		return ctrl.Result{RequeueAfter: requeue}, nil
	case errors.Is(outcome, errStale):
		return ctrl.Result{RequeueAfter: staleRetry}, nil
	case errors.Is(outcome, errGone):
		return ctrl.Result{}, nil
	case errors.As(outcome, &stalling):
		if f.spell.stalled != nil {
			f.spell.stalled(obj, stalling.reason, stalling.msg)
		}
		return ctrl.Result{RequeueAfter: stalling.requeue}, nil
	case errors.As(outcome, &waiting):
		if f.spell.waiting != nil {
			f.spell.waiting(obj, waiting.reason, waiting.msg)
		}
		return ctrl.Result{RequeueAfter: waiting.requeue}, nil
	case errors.As(outcome, &awaiting):
		switch {
		case f.spell.awaiting != nil:
			f.spell.awaiting(obj, awaiting.reason, awaiting.msg)
		case f.spell.waiting != nil:
			f.spell.waiting(obj, awaiting.reason, awaiting.msg)
		}
		return ctrl.Result{RequeueAfter: awaiting.requeue}, nil
	case apierrors.IsConflict(outcome):
		// Someone else changed the object (or one it writes) meanwhile:
		// what was learned so far is still written, and the reconcile runs
		// again (see quiet).
		return ctrl.Result{}, outcome
	}
	if f.spell.transient != nil {
		f.spell.transient(obj, outcome)
	}
	return ctrl.Result{}, outcome
}

// quiet turns a lost optimistic-locking race (409 Conflict, "the object has
// been modified") into a requeue logged at debug level: returned as an
// error, controller-runtime would log it as "Reconciler error" with a stack
// trace every few seconds while a Stack retries, which reads as a crash.
// The conflicts come from the locked status writes and from whole-object
// updates of finalizers; whichever way a reconcile lost, it kept no decision
// in memory, so running it again decides from the stored state. An error
// otherwise clears the result: controller-runtime ignores (and warns about)
// a result beside an error, whose backoff decides the retry.
//
// A reconcile cut short by the operator stopping (its context ended) is not
// an error either: its requests fail with "context canceled", and the next
// leader reconciles again from the stored state. An error returned is
// logged by controller-runtime: its text has the user info of URLs masked
// (a Stack's projectRepo may carry a token), as conditions do.
func quiet(ctx context.Context, result ctrl.Result, err error) (ctrl.Result, error) {
	switch {
	case err == nil:
		return result, nil
	case apierrors.IsConflict(err):
		log.FromContext(ctx).V(1).Info("Lost a write race to another writer; reconciling again on the stored object", "error", err.Error())
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	case ctx.Err() != nil:
		log.FromContext(ctx).V(1).Info("Stopped by the operator's shutdown", "error", redact.URLCredentials(err.Error()))
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, maskedError{err}
}

// maskedError is an error whose text has the user info of URLs masked.
type maskedError struct{ err error }

func (e maskedError) Error() string { return redact.URLCredentials(e.err.Error()) }
func (e maskedError) Unwrap() error { return e.err }

// outcomeLabel names an outcome for the metric.
func outcomeLabel(outcome error) string {
	var done *upToDateOutcome
	var stalling *stallingError
	var waiting *waitingError
	var awaiting *awaitingError
	switch {
	case outcome == nil || errors.As(outcome, &done):
		return "ready"
	case errors.Is(outcome, errStale):
		return "stale"
	case errors.Is(outcome, errGone):
		return "gone"
	case errors.As(outcome, &stalling):
		return "stalled"
	case errors.As(outcome, &waiting):
		return "waiting"
	case errors.As(outcome, &awaiting):
		return "awaiting"
	case apierrors.IsConflict(outcome):
		return "conflict"
	}
	return "transient"
}

// writeFailedLabel names, for the metric, a reconcile whose status write
// failed, err being what it returns (nil: the object is gone).
func writeFailedLabel(err error) string {
	switch {
	case err == nil:
		return "gone"
	case apierrors.IsConflict(err):
		return "conflict"
	}
	return "transient"
}

// statusOf is obj's status: every API kind keeps it in its Status field.
func statusOf(obj client.Object) reflect.Value {
	return reflect.ValueOf(obj).Elem().FieldByName("Status")
}
