package controller

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

// configurePolicy bounds how long applying a stack's configuration may keep
// failing with an error that may pass (a stack lock, an unreachable backend,
// an agent restarting) before the Workspace is Stalled: a failure that does
// not pass must show as one, never as Reconciling for ever.
type configurePolicy struct {
	// FirstRetry is the delay after the first failure, doubled after each
	// one up to MaxRetry.
	FirstRetry, MaxRetry time.Duration
	// StallAfter and StallAttempts: the Workspace is Stalled once the
	// failures have lasted StallAfter over at least StallAttempts attempts
	// (both, so that neither a burst of attempts nor a single late one
	// stalls it).
	StallAfter    time.Duration
	StallAttempts int32
}

// defaultConfigurePolicy is the policy the API documents on
// status.configurationFailure.
var defaultConfigurePolicy = configurePolicy{FirstRetry: 5 * time.Second, MaxRetry: 5 * time.Minute, StallAfter: 2 * time.Minute, StallAttempts: 5}

// retryAfter is the delay after the attempts-th consecutive failure.
func (p configurePolicy) retryAfter(attempts int32) time.Duration {
	d := p.FirstRetry
	for i := int32(1); i < attempts && d < p.MaxRetry; i++ {
		d *= 2
	}
	return min(d, p.MaxRetry)
}

// current is the failure record that still counts for generation gen: one
// of an older spec does not.
func current(f *autov1alpha1.WorkspaceConfigurationFailure, gen int64) *autov1alpha1.WorkspaceConfigurationFailure {
	if f == nil || f.Generation != gen {
		return nil
	}
	return f
}

// due is how long to wait before the next attempt to configure the stacks of
// generation gen, given the failures so far (0: now).
func (p configurePolicy) due(f *autov1alpha1.WorkspaceConfigurationFailure, gen int64, now time.Time) time.Duration {
	f = current(f, gen)
	if f == nil {
		return 0
	}
	return max(f.LastAttempt.Add(p.retryAfter(f.Attempts)).Sub(now), 0)
}

// configureFailure is what a failed attempt leads to.
type configureFailure struct {
	// Record replaces status.configurationFailure.
	Record *autov1alpha1.WorkspaceConfigurationFailure
	// Stalled: the failure has lasted; After: the next attempt.
	Stalled bool
	After   time.Duration
}

// failed decides after a failed attempt to configure stack for generation
// gen, with prev the record so far.
func (p configurePolicy) failed(prev *autov1alpha1.WorkspaceConfigurationFailure, gen int64, stack string, now time.Time) configureFailure {
	at := metav1.NewTime(now)
	next := &autov1alpha1.WorkspaceConfigurationFailure{Stack: stack, Generation: gen, Since: at, LastAttempt: at, Attempts: 1}
	if prev := current(prev, gen); prev != nil {
		// Consecutive failures of the same spec count together, whichever
		// stack failed: the Workspace is not ready through all of them.
		next.Since, next.Attempts = prev.Since, prev.Attempts+1
	}
	return configureFailure{Record: next, Stalled: p.stalled(next), After: p.retryAfter(next.Attempts)}
}

// stalled: the failures of f have lasted long enough to stall the Workspace.
func (p configurePolicy) stalled(f *autov1alpha1.WorkspaceConfigurationFailure) bool {
	return f != nil && f.Attempts >= p.StallAttempts && f.LastAttempt.Sub(f.Since.Time) >= p.StallAfter
}

// reconcileConfiguration applies the spec's stack configuration through the
// agent. It reports false, with the result to return, while it fails.
func (r *WorkspaceReconciler) reconcileConfiguration(ctx context.Context, ws *autov1alpha1.Workspace, agent agentv1.AgentClient) (bool, ctrl.Result, error) {
	gen := ws.Generation
	conds := &ws.Status.Conditions
	now := r.now()
	p := defaultConfigurePolicy
	if wait := p.due(ws.Status.ConfigurationFailure, gen, now); wait > 0 {
		// Backing off after a failure (a restarted operator too): Ready
		// still says why, and Stalled is kept while it holds.
		ready := apimeta.FindStatusCondition(*conds, autov1alpha1.WorkspaceReady)
		if ready != nil && ready.Reason == autov1alpha1.WorkspaceReasonConfigurationFailed && p.stalled(ws.Status.ConfigurationFailure) {
			setCondition(conds, gen, autov1alpha1.WorkspaceStalled, metav1.ConditionTrue, autov1alpha1.WorkspaceReasonConfigurationFailed, ready.Message)
		}
		return false, ctrl.Result{RequeueAfter: wait}, nil
	}
	for _, s := range ws.Spec.Stacks {
		err := selectStack(ctx, agent, s)
		if err == nil {
			continue
		}
		msg := fmt.Sprintf("configure stack %s: %s", s.Name, status.Convert(err).Message())
		if c := status.Code(err); c == codes.InvalidArgument || c == codes.NotFound {
			// The user must fix the configuration: stalled until the spec changes.
			setCondition(conds, gen, autov1alpha1.WorkspaceReady, metav1.ConditionFalse, autov1alpha1.WorkspaceReasonConfigurationFailed, msg)
			setCondition(conds, gen, autov1alpha1.WorkspaceStalled, metav1.ConditionTrue, autov1alpha1.WorkspaceReasonConfigurationFailed, msg)
			return false, ctrl.Result{}, nil
		}
		d := p.failed(ws.Status.ConfigurationFailure, gen, s.Name, now)
		ws.Status.ConfigurationFailure = d.Record
		f := d.Record
		msg = fmt.Sprintf("%s (%d attempts since %s; next at %s)", msg, f.Attempts, f.Since.UTC().Format(time.RFC3339), now.Add(d.After).UTC().Format(time.RFC3339))
		setCondition(conds, gen, autov1alpha1.WorkspaceReady, metav1.ConditionFalse, autov1alpha1.WorkspaceReasonConfigurationFailed, msg)
		if d.Stalled {
			setCondition(conds, gen, autov1alpha1.WorkspaceStalled, metav1.ConditionTrue, autov1alpha1.WorkspaceReasonConfigurationFailed, msg)
		} else {
			apimeta.RemoveStatusCondition(conds, autov1alpha1.WorkspaceStalled)
		}
		log.FromContext(ctx).Info("Configuring a stack failed", "stack", s.Name, "attempts", f.Attempts, "stalled", d.Stalled, "message", msg)
		// Tried again after the backoff, stalled or not: the cause (a lock,
		// the backend) may go away without the spec changing.
		return false, ctrl.Result{RequeueAfter: d.After}, nil
	}
	ws.Status.ConfigurationFailure = nil
	apimeta.RemoveStatusCondition(conds, autov1alpha1.WorkspaceStalled)
	return true, ctrl.Result{}, nil
}
