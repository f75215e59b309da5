package controller

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/stackflow-io/stackflow/internal/conditions"
	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/gitresolve"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
)

// StackFinalizer keeps a Stack until its resources are destroyed (with
// destroyOnFinalize) and its Workspace is removed. It is PKO's finalizer name,
// so Stacks move between the operators.
const StackFinalizer = "finalizer.stack.pulumi.com"

// BranchResolver resolves a branch head without waiting for the git server
// (gitresolve.Shared.Resolve in production): a *gitresolve.PendingError says
// a listing is under way, whose end wakes the Stack.
type BranchResolver func(ctx context.Context, req gitresolve.Request) (string, error)

// StackReconciler keeps Stacks up to date by deriving a Workspace and running
// Updates in it, following the pure decisions of package stack.
type StackReconciler struct {
	client.Client
	Recorder record.EventRecorder
	// Resolve resolves branches; default Git.Resolve.
	Resolve BranchResolver
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Workers is the controller's concurrency.
	Workers int
	// ResyncOverride, when set, replaces every Stack's resync interval (the
	// CRD's minimum is 60 s): for tests and local demos only.
	ResyncOverride time.Duration

	// APIReader reads around the cache: before an Update starts, the Stack
	// it was decided on is checked to be current. Default: the manager's.
	APIReader client.Reader
	// DigestKey keys the digests of referenced inputs (status.lastUpdate.
	// inputsDigest), so they reveal nothing about Secret values.
	DigestKey []byte
	// Git is the shared resolver: it lists repositories off the reconcile
	// workers and wakes the Stacks whose answer a listing changed; a push
	// (PushAnnotation) invalidates its listings. Default: one with a
	// minute's TTL and the default limits.
	Git *gitresolve.Shared
	// SecretPollInterval is how often an up-to-date Stack that reads
	// Secrets reads them again, so a rotated value is deployed: Secrets are
	// read from the API server, never watched. Default DefaultSecretPoll.
	SecretPollInterval time.Duration
	// SSHKnownHosts holds the operator's known_hosts lines (--ssh-known-hosts),
	// verifying SSH host keys for Stacks that name no knownHosts of their own.
	SSHKnownHosts string
	// WorkspaceIdleTimeout, when positive, removes the Workspace of an
	// up-to-date Stack idle this long (--workspace-idle-timeout), unless
	// the Stack sets spec.workspaceIdleTimeoutSeconds.
	WorkspaceIdleTimeout time.Duration
	// UpdateHistory is how many finished Updates each Stack keeps
	// (--update-history; 0 keeps all, bounded by their TTL only).
	UpdateHistory int
	// GitHubAPIHosts, when set (--github-api-hosts), are the hosts a
	// Stack's gitAuth.githubApp.apiURL may name (gitauth.CheckAPIURL); a
	// Stack naming another is Stalled (SpecInvalid) before anything is sent.
	GitHubAPIHosts []string
}

// DefaultSecretPoll is how often a Stack re-reads its Secrets by default.
const DefaultSecretPoll = time.Minute

// secretPoll is when an up-to-date Stack looks again: at its resync
// (requeue, 0 for never) or, when it reads Secrets, at the latest after
// interval, since no watch tells it that one changed or appeared.
func secretPoll(s *pulumiv1.Stack, requeue, interval time.Duration) time.Duration {
	if len(referencedSecrets(s)) == 0 || interval <= 0 {
		return requeue
	}
	if requeue == 0 || interval < requeue {
		return interval
	}
	return requeue
}

// stackScope is what one reconcile of a Stack has learned so far.
type stackScope struct {
	stack    *pulumiv1.Stack
	src      stack.Source
	inputs   stack.Inputs
	ws       *autov1alpha1.Workspace
	decision stack.Decision
	// gate is the approval gate's verdict on a Run decision of a Stack
	// requiring approval (reconcileApproval); nil otherwise.
	gate *stack.GateDecision
}

// Reconcile converges one Stack: record the update that finished and export
// its outputs, refuse a dependency cycle, resolve the source and inputs,
// derive the Workspace, decide, then wait for
// prerequisites and the workspace and start an update. Every fact a decision
// needs is in the Stack's status, written once by the finisher, which then
// releases the Updates whose results the stored status records.
func (r *StackReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := &pulumiv1.Stack{}
	if err := r.Get(ctx, req.NamespacedName, s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	base, sc := s.DeepCopy(), &stackScope{stack: s}
	steps := []step[*stackScope]{
		r.reconcileFinalizer, r.reconcileCurrentUpdate, r.reconcileExports, r.reconcileDependencies, r.reconcileSource, r.reconcileInputs,
		r.reconcileWorkspaceSpec, r.reconcileDecision, r.reconcileApproval, r.reconcilePrerequisites, r.reconcileWorkspace, r.reconcileStart,
	}
	if !s.DeletionTimestamp.IsZero() {
		steps = []step[*stackScope]{r.reconcileDelete}
	}
	return r.finisher().finish(ctx, base, s, runSteps(ctx, sc, steps...),
		func(ctx context.Context) error { return r.releaseUpdates(ctx, s) })
}

func (r *StackReconciler) reconcileFinalizer(ctx context.Context, sc *stackScope) error {
	if controllerutil.AddFinalizer(sc.stack, StackFinalizer) {
		return r.Update(ctx, sc.stack)
	}
	return nil
}

// reconcileSource resolves the revision to deploy.
func (r *StackReconciler) reconcileSource(ctx context.Context, sc *stackScope) error {
	if err := stack.CrossNamespaceRefs(sc.stack); err != nil {
		return r.classifySourceError(sc.stack, err)
	}
	src, err := r.resolveSource(ctx, sc.stack)
	if err != nil {
		return r.classifySourceError(sc.stack, err)
	}
	sc.src = src
	return nil
}

// reconcileInputs reads the referenced ConfigMaps and Secrets.
func (r *StackReconciler) reconcileInputs(ctx context.Context, sc *stackScope) error {
	in, err := r.readInputs(ctx, sc.stack, sc.src)
	if err != nil {
		return r.classifySourceError(sc.stack, err)
	}
	sc.inputs = in
	return nil
}

// reconcileWorkspaceSpec derives the Workspace the Stack needs.
func (r *StackReconciler) reconcileWorkspaceSpec(_ context.Context, sc *stackScope) error {
	ws, err := stack.Workspace(sc.stack, sc.inputs)
	if err != nil {
		return r.classifySourceError(sc.stack, err)
	}
	sc.ws = ws
	return nil
}

// reconcileDecision applies the policy: up to date (look again later), retry
// later, stalled, or run.
func (r *StackReconciler) reconcileDecision(ctx context.Context, sc *stackScope) error {
	s := sc.stack
	d := stack.Decide(stack.Input{Stack: s, Revision: sc.src.Revision, InputsDigest: sc.inputs.Digest, Now: r.Now(), ResyncOverride: r.ResyncOverride})
	sc.decision = d
	switch d.Action {
	case stack.UpToDate:
		requeue := secretPoll(s, d.RequeueAfter, r.SecretPollInterval)
		idle, after := stack.IdleReclaim(s, r.WorkspaceIdleTimeout, r.Now())
		switch {
		case idle:
			if err := r.deleteWorkspace(ctx, s); err != nil {
				return err
			}
		case s.Spec.WorkspaceReclaimPolicy == pulumiv1.WorkspaceReclaimDelete:
			if err := r.reclaimWorkspace(ctx, s); err != nil {
				return err
			}
		default:
			if after > 0 && (requeue == 0 || after < requeue) {
				// Looked at again when the Workspace has been idle long
				// enough to go.
				requeue = after
			}
			if err := r.keepWorkspaceInShard(ctx, s); err != nil {
				return err
			}
		}
		if s.ExportFailed() {
			// Up to date, but what reads its exports reads an older
			// update's values: the user must act (or the next update
			// exports again).
			return &stallingError{reason: pulumiv1.StalledExportFailedReason, msg: s.Status.Exports.Message, requeue: requeue}
		}
		return upToDate(requeue)
	case stack.Stall:
		return &stallingError{reason: d.Condition, msg: d.Reason, requeue: d.RequeueAfter}
	case stack.Retry:
		return &waitingError{reason: d.Condition, msg: d.Reason, requeue: d.RequeueAfter}
	}
	return nil
}

// reconcileStart starts the update the decision asks for.
func (r *StackReconciler) reconcileStart(ctx context.Context, sc *stackScope) error {
	d := sc.decision
	if sc.gate != nil {
		p, why := r.gatedUpdate(sc)
		return r.startUpdate(ctx, sc, p, why)
	}
	return r.startUpdate(ctx, sc, stack.Plan{
		Type: d.UpdateType, Purpose: d.Purpose, Refresh: d.Refresh, Revision: sc.src.Revision,
		InputsDigest: sc.inputs.Digest, Message: "Stackflow: " + d.Reason,
	}, d.Reason)
}

// reconcilePrerequisites waits until each prerequisite's last up succeeded
// (recently enough), asking stale ones to re-sync. Drift checks change
// nothing and do not wait.
func (r *StackReconciler) reconcilePrerequisites(ctx context.Context, sc *stackScope) error {
	s := sc.stack
	if sc.decision.Purpose == pulumiv1.UpdatePurposeDriftCheck {
		return nil
	}
	for _, p := range s.Spec.Prerequisites {
		var other pulumiv1.Stack
		err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: p.Name}, &other)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		pr := stack.Prerequisite{Name: p.Name, Found: err == nil, LastUpdate: other.Status.LastUpdate,
			Exports: other.Spec.Exports != nil, ExportsCurrent: other.ExportsCurrent(),
			Updating: other.Status.CurrentUpdate != nil && other.Status.CurrentUpdate.Purpose != pulumiv1.UpdatePurposeDriftCheck}
		if p.Requirement != nil && p.Requirement.SucceededWithinDuration != nil {
			pr.Within = p.Requirement.SucceededWithinDuration.Duration
		}
		v := stack.CheckPrerequisite(pr, r.Now())
		if v.Satisfied {
			continue
		}
		if v.Resync {
			if err := r.requestResync(ctx, &other); err != nil {
				return err
			}
		}
		// The prerequisite's status change wakes this Stack; the requeue
		// covers a prerequisite that does not exist yet.
		return &waitingError{reason: pulumiv1.ReconcilingPrerequisiteNotSatisfiedReason, msg: v.Message, requeue: 30 * time.Second}
	}
	return nil
}

// requestResync sets a new reconciliation request on a stale prerequisite,
// unless one is already pending.
func (r *StackReconciler) requestResync(ctx context.Context, other *pulumiv1.Stack) error {
	pending := other.Annotations[pulumiv1.ReconcileRequestAnnotation]
	if pending != "" && (other.Status.LastUpdate == nil || other.Status.LastUpdate.ReconcileRequest != pending) {
		return nil
	}
	patch := client.MergeFrom(other.DeepCopy())
	if other.Annotations == nil {
		other.Annotations = map[string]string{}
	}
	other.Annotations[pulumiv1.ReconcileRequestAnnotation] = r.Now().UTC().Format(time.RFC3339Nano)
	return r.Patch(ctx, other, patch)
}

// reconcileWorkspace creates or updates the Stack's Workspace and waits until
// it is ready for the current spec.
func (r *StackReconciler) reconcileWorkspace(ctx context.Context, sc *stackScope) error {
	s, want := sc.stack, sc.ws
	if err := controllerutil.SetControllerReference(s, want, r.Scheme()); err != nil {
		return err
	}
	var cur autov1alpha1.Workspace
	err := r.Get(ctx, client.ObjectKeyFromObject(want), &cur)
	switch {
	case apierrors.IsNotFound(err):
		// Not in this shard's cache: a Workspace of the Stack's former
		// shard is taken over (stack_shard.go).
		if err := r.workspaceElsewhere(ctx, s); err != nil {
			return err
		}
		if err := r.Create(ctx, want); err != nil {
			return createError(s, "workspace", err)
		}
		// The Workspace's status changes wake the Stack (Owns).
		return &waitingError{reason: pulumiv1.ReconcilingProcessingReason, msg: "waiting for the workspace to be created and ready"}
	case err != nil:
		return err
	}
	if !equality.Semantic.DeepEqual(cur.Spec, want.Spec) || !equality.Semantic.DeepEqual(cur.Labels, want.Labels) {
		cur.Spec, cur.Labels = want.Spec, want.Labels
		if want.Annotations != nil {
			cur.Annotations = want.Annotations
		}
		if err := r.Update(ctx, &cur); err != nil {
			return fmt.Errorf("update workspace: %w", err)
		}
		return &waitingError{reason: pulumiv1.ReconcilingProcessingReason, msg: "waiting for the workspace to apply the new spec"}
	}
	return workspaceReadiness(&cur)
}

// workspaceReadiness is nil for a Workspace ready for its spec, else why the
// Stack waits (or is stalled). Only conditions written for the Workspace's
// current generation count: right after the Stack changes the Workspace's
// spec (a new commit), its conditions still describe the old one, and a
// checkout that failed there says nothing about the new commit.
func workspaceReadiness(ws *autov1alpha1.Workspace) error {
	ready := conditions.Current(ws, ws.Status.Conditions, autov1alpha1.WorkspaceReady)
	if ready != nil && ready.Status == metav1.ConditionTrue && ws.Status.ObservedGeneration == ws.Generation {
		return nil
	}
	if stalled := conditions.Current(ws, ws.Status.Conditions, autov1alpha1.WorkspaceStalled); stalled != nil && stalled.Status == metav1.ConditionTrue {
		reason := pulumiv1.StalledWorkspaceFailedReason
		if stalled.Reason == autov1alpha1.WorkspaceReasonSourceUnavailable {
			reason = pulumiv1.StalledSourceUnavailableReason
		}
		// The Workspace's recovery wakes the Stack.
		return &stallingError{reason: reason, msg: "workspace failed: " + stalled.Message}
	}
	msg := "waiting for the workspace"
	switch {
	case ready != nil:
		msg += ": " + ready.Message
	case len(ws.Status.Conditions) > 0:
		// The Workspace's status change wakes the Stack.
		msg = fmt.Sprintf("waiting for the workspace to apply its new spec (generation %d)", ws.Generation)
	}
	return &waitingError{reason: pulumiv1.ReconcilingProcessingReason, msg: msg}
}

// reclaimWorkspace deletes the Workspace of an up-to-date Stack whose
// workspaceReclaimPolicy is Delete.
func (r *StackReconciler) reclaimWorkspace(ctx context.Context, s *pulumiv1.Stack) error {
	if s.Spec.WorkspaceReclaimPolicy != pulumiv1.WorkspaceReclaimDelete {
		return nil
	}
	return r.deleteWorkspace(ctx, s)
}

// deleteWorkspace deletes the Stack's Workspace (and so its pod), by name:
// whichever shard's cache holds it.
func (r *StackReconciler) deleteWorkspace(ctx context.Context, s *pulumiv1.Stack) error {
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}}
	return client.IgnoreNotFound(r.Delete(ctx, ws))
}
