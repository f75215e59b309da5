package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/stackflow-io/stackflow/internal/conditions"
	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
	"github.com/stackflow-io/stackflow/operator/internal/gitresolve"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
)

// StackFinalizer keeps a Stack until its resources are destroyed (with
// destroyOnFinalize) and its Workspace is removed. It is PKO's finalizer name,
// so Stacks move between the operators.
const StackFinalizer = "finalizer.stack.pulumi.com"

// BranchResolver resolves a branch head; gitresolve.Branch in production.
type BranchResolver func(ctx context.Context, url, branch string, auth gitauth.Credentials) (string, error)

// StackReconciler keeps Stacks up to date by deriving a Workspace and running
// Updates in it, following the pure decisions of package stack.
type StackReconciler struct {
	client.Client
	Recorder record.EventRecorder
	// Resolve resolves branches; default gitresolve.Branch.
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
	// Git, when set, is the shared resolver whose listings a push
	// (pushAnnotation) invalidates.
	Git *gitresolve.Shared
	// SecretPollInterval is how often an up-to-date Stack that reads
	// Secrets reads them again, so a rotated value is deployed: Secrets are
	// read from the API server, never watched. Default DefaultSecretPoll.
	SecretPollInterval time.Duration
	// SSHKnownHosts holds the operator's known_hosts lines (--ssh-known-hosts),
	// verifying SSH host keys for Stacks that name no knownHosts of their own.
	SSHKnownHosts string
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

// SetupWithManager registers the controller and its watches.
func (r *StackReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Resolve == nil {
		r.Resolve = gitresolve.Branch
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.SecretPollInterval == 0 {
		r.SecretPollInterval = DefaultSecretPoll
	}
	registerStackStates.Do(func() { metrics.Registry.MustRegister(stackStates{reader: mgr.GetClient()}) })
	if err := indexStacks(mgr.GetFieldIndexer()); err != nil {
		return err
	}
	c, err := ctrl.NewControllerManagedBy(mgr).
		For(&pulumiv1.Stack{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Owns(&autov1alpha1.Workspace{}).
		Owns(&autov1alpha1.Update{}).
		// A Stack's status change wakes the Stacks that list it as a
		// prerequisite.
		Watches(&pulumiv1.Stack{}, handler.EnqueueRequestsFromMapFunc(r.indexed(prerequisiteField, objectName))).
		// A Program's new artifact wakes the Stacks that use it.
		Watches(&pulumiv1.Program{}, handler.EnqueueRequestsFromMapFunc(r.indexed(programRefField, objectName))).
		// A ConfigMap a Stack refers to appearing or changing wakes it: a
		// Stack stalled on a missing reference recovers by itself. Secrets
		// are not watched (the role grants no list or watch of Secrets, which
		// would read every Secret of the cluster): a Stack reading Secrets
		// reads them again every SecretPollInterval (secretPoll).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.indexed(configMapsField, objectName))).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Workers, 1)}).
		Build(quietConflicts(r))
	if err != nil {
		return err
	}
	// Flux sources are watched once their CRDs are served (Flux may be
	// installed after the operator, or never).
	return mgr.Add(&fluxWatcher{ctrl: c, cache: mgr.GetCache(), config: mgr.GetConfig(), mapFunc: r.indexed(fluxSourceField, fluxObjectKey)})
}

// NotePush records a verified push on every Stack tracking the pushed branch
// of the repository (given in any of its URL forms), as the PushAnnotation
// with the push's token, and returns how many it marked. The annotation change
// reconciles each Stack on the leader, whichever replica received the push,
// and a push is not lost when the leader changes; the first reconcile lists
// the repository afresh for all of them (gitresolve.Shared.InvalidateOnce).
func (r *StackReconciler) NotePush(ctx context.Context, urls []string, branch, token string) (int, error) {
	n := 0
	seen := map[string]bool{}
	for _, u := range urls {
		key := gitresolve.NormalizeURL(u)
		if seen[key] {
			continue
		}
		seen[key] = true
		var list pulumiv1.StackList
		if err := r.List(ctx, &list, client.MatchingFields{repositoryField: key}); err != nil {
			return n, fmt.Errorf("list the Stacks of a pushed repository: %w", err)
		}
		for i := range list.Items {
			s := &list.Items[i]
			if strings.TrimPrefix(s.Spec.Branch, "refs/heads/") != branch {
				continue
			}
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, PushAnnotation, token)
			if err := r.Patch(ctx, s, client.RawPatch(types.MergePatchType, []byte(patch))); client.IgnoreNotFound(err) != nil {
				return n, fmt.Errorf("mark stack %s/%s: %w", s.Namespace, s.Name, err)
			}
			n++
		}
	}
	return n, nil
}

// Stacks: cached reads, the finalizer (Update), push and resync request
// annotations (Patch), the one status patch; finalizers/update for the
// blockOwnerDeletion references of its Workspace and Updates. Updates are
// created, released (Patch of the result finalizer) and old drift checks
// deleted; the Workspace created, updated and deleted. Referenced ConfigMaps
// are watched, referenced Secrets read by name (never cached or watched).
// +kubebuilder:rbac:groups=pulumi.com,resources=stacks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=pulumi.com,resources=stacks/status,verbs=patch
// +kubebuilder:rbac:groups=pulumi.com,resources=stacks/finalizers,verbs=update
// +kubebuilder:rbac:groups=pulumi.com,resources=programs,verbs=get;list;watch
// +kubebuilder:rbac:groups=source.toolkit.fluxcd.io,resources=gitrepositories;ocirepositories;buckets,verbs=get;list;watch
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=workspaces,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=updates,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// stackScope is what one reconcile of a Stack has learned so far.
type stackScope struct {
	stack    *pulumiv1.Stack
	src      stack.Source
	inputs   stack.Inputs
	ws       *autov1alpha1.Workspace
	decision stack.Decision
	// requeue is when an up-to-date Stack looks again.
	requeue time.Duration
	// skipStatus: the Stack read from the cache is older than the stored
	// one; writing its status would fail, so the reconcile only requeues.
	skipStatus bool
}

// stackStep is one reconcile step: nil to go on, or an error that ends the
// reconcile (see summarize).
type stackStep func(ctx context.Context, sc *stackScope) error

// Reconcile converges one Stack: record the update that finished, resolve
// the source and inputs, derive the Workspace, decide, then wait for
// prerequisites and the workspace and start an update. Every fact a decision
// needs is in the Stack's status, written once at the end.
func (r *StackReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	s := &pulumiv1.Stack{}
	if err := r.Get(ctx, req.NamespacedName, s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	sc := &stackScope{stack: s}
	base := s.DeepCopy()
	defer func() { r.finish(ctx, base, sc, &retErr) }()

	if !s.DeletionTimestamp.IsZero() {
		return r.summarize(sc, r.reconcileDelete(ctx, sc))
	}
	for _, step := range []stackStep{
		r.reconcileFinalizer, r.reconcileCurrentUpdate, r.reconcileSource, r.reconcileInputs, r.reconcileWorkspaceSpec,
		r.reconcileDecision, r.reconcilePrerequisites, r.reconcileWorkspace, r.reconcileStart,
	} {
		if err := step(ctx, sc); err != nil {
			return r.summarize(sc, err)
		}
	}
	return r.summarize(sc, nil)
}

// finish writes the status (once, with optimistic locking, so a reconcile
// that worked from a stale copy cannot overwrite a newer status), then
// mirrors the Ready condition as an event and releases the Updates whose
// results the status now records.
func (r *StackReconciler) finish(ctx context.Context, base *pulumiv1.Stack, sc *stackScope, retErr *error) {
	s := sc.stack
	if sc.skipStatus {
		return
	}
	if !equality.Semantic.DeepEqual(base.Status, s.Status) {
		patch := client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
		if err := r.Status().Patch(ctx, s, patch); err != nil {
			if *retErr == nil {
				*retErr = client.IgnoreNotFound(err)
			}
			return
		}
	}
	r.recordEvent(base, s)
	if err := r.releaseUpdates(ctx, s); err != nil && *retErr == nil {
		*retErr = err
	}
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
		sc.requeue = secretPoll(s, d.RequeueAfter, r.SecretPollInterval)
		if err := r.reclaimWorkspace(ctx, s); err != nil {
			return err
		}
		return errUpToDate
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
		pr := stack.Prerequisite{Name: p.Name, Found: err == nil, LastUpdate: other.Status.LastUpdate}
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
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}}
	return client.IgnoreNotFound(r.Delete(ctx, ws))
}
