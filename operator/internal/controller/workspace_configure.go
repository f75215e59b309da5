package controller

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
)

// configurePolicy decides what a failed attempt to apply the stacks'
// configuration leads to. A failure that may pass (a stack locked by another
// run, an unreachable backend, an agent restarting) is retried with backoff,
// and one that lasts ends Stalled: never Reconciling for ever with the same
// error.
type configurePolicy struct {
	// FirstRetry is the delay after the first failure, doubled after each
	// one up to MaxRetry.
	FirstRetry, MaxRetry time.Duration
	// The Workspace is Stalled once the failures have lasted StallAfter over
	// at least StallAttempts attempts (both: neither a burst of attempts, as
	// operator restarts make, nor a single slow one stalls it).
	StallAfter    time.Duration
	StallAttempts int32
}

// defaultConfigurePolicy is the policy the API documents on
// status.configurationFailure.
var defaultConfigurePolicy = configurePolicy{FirstRetry: 5 * time.Second, MaxRetry: 5 * time.Minute, StallAfter: 2 * time.Minute, StallAttempts: 5}

// configureWaitRetry is how soon a configuration that waits for an update or
// a checkout is asked again.
const configureWaitRetry = 5 * time.Second

// configureDecision is what a failed attempt leads to.
type configureDecision struct {
	// Waiting: not a failure (the agent configures the stack after the
	// update or checkout it runs); the record is left as it is.
	Waiting bool
	// Record replaces status.configurationFailure (unless Waiting).
	Record *autov1alpha1.WorkspaceConfigurationFailure
	// Stalled: the user must act, or the failure has lasted.
	Stalled bool
	// After is the next attempt; 0 with Stalled: only a new spec retries.
	After time.Duration
}

// decide classifies err, the agent's answer to configuring a stack of
// generation gen at now, given the record of the failures before it.
func (p configurePolicy) decide(err error, prev *autov1alpha1.WorkspaceConfigurationFailure, gen int64, now time.Time) configureDecision {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound:
		// An invalid configuration, or a stack missing with create off: the
		// user must fix the spec, whose change retries it.
		return configureDecision{Stalled: true}
	case codes.FailedPrecondition:
		// An update or a checkout runs in the workspace.
		return configureDecision{Waiting: true, After: configureWaitRetry}
	}
	next := &autov1alpha1.WorkspaceConfigurationFailure{Generation: gen, Since: metav1.NewTime(now), Attempts: 1}
	if prev != nil && prev.Generation == gen {
		// Consecutive failures of the same spec count together, whichever
		// stack failed: the Workspace is not ready through all of them. Those
		// of an older spec do not count.
		next.Since, next.Attempts = prev.Since, prev.Attempts+1
	}
	stalled := next.Attempts >= p.StallAttempts && now.Sub(next.Since.Time) >= p.StallAfter
	// Retried after the backoff, stalled or not: the cause (a lock, the
	// backend) may go away without the spec changing.
	return configureDecision{Record: next, Stalled: stalled, After: p.retryAfter(next.Attempts)}
}

// retryAfter is the delay after the attempts-th consecutive failure.
func (p configurePolicy) retryAfter(attempts int32) time.Duration {
	d := p.FirstRetry
	for i := int32(1); i < attempts && d < p.MaxRetry; i++ {
		d *= 2
	}
	return min(d, p.MaxRetry)
}

// reconcileConfiguration applies the spec's stack configuration through the
// agent, once per change of it or of the agent (restarted, or a new
// checkout), and goes on once applied.
func (r *WorkspaceReconciler) reconcileConfiguration(ctx context.Context, sc *workspaceScope) error {
	ws, info := sc.ws, sc.info
	applied := appliedConfig{instance: info.Instance, checkouts: info.Checkouts, hash: stacksHash(ws.Spec.Stacks)}
	if prev, ok := r.applied.Load(ws.UID); ok && prev.(appliedConfig) == applied {
		return nil
	}
	for _, s := range ws.Spec.Stacks {
		err := selectStack(ctx, sc.agent, s)
		if err == nil {
			continue
		}
		now := r.now()
		d := defaultConfigurePolicy.decide(err, ws.Status.ConfigurationFailure, ws.Generation, now)
		msg := fmt.Sprintf("configure stack %s: %s", s.Name, status.Convert(err).Message())
		if d.Waiting {
			return &waitingError{reason: autov1alpha1.WorkspaceReasonInitializing, msg: "waiting to " + msg, requeue: d.After}
		}
		ws.Status.ConfigurationFailure = d.Record
		if f := d.Record; f != nil {
			// The retry's time, not a countdown, as for checkouts.
			msg = fmt.Sprintf("%s (%d failed attempts since %s; next at %s)", msg, f.Attempts,
				f.Since.UTC().Format(time.RFC3339), now.Add(d.After).UTC().Format(time.RFC3339))
		}
		log.FromContext(ctx).Info("Configuring a stack failed", "stack", s.Name, "stalled", d.Stalled, "message", msg)
		if d.Stalled {
			return &stallingError{reason: autov1alpha1.WorkspaceReasonConfigurationFailed, msg: msg, requeue: d.After}
		}
		return &waitingError{reason: autov1alpha1.WorkspaceReasonConfigurationFailed, msg: msg, requeue: d.After}
	}
	ws.Status.ConfigurationFailure = nil
	r.applied.Store(ws.UID, applied)
	log.FromContext(ctx).Info("Applied stack configuration", "stacks", len(ws.Spec.Stacks), "agent", info.Instance)
	return nil
}
