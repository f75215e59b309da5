package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/gitresolve"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
)

// StackFinalizer keeps a Stack until its resources are destroyed (with
// destroyOnFinalize) and its Workspace is removed. It is PKO's finalizer name,
// so Stacks move between the operators.
const StackFinalizer = "finalizer.stack.pulumi.com"

// Stack indexes: by the names of their prerequisites, and by their Program.
const (
	prerequisiteField = "spec.prerequisites.name"
	programRefField   = "spec.programRef.name"
	configMapsField   = "stackflow.configmaps"
	secretsField      = "stackflow.secrets"
	repositoryField   = "stackflow.repository"
)

// BranchResolver resolves a branch head; gitresolve.Branch in production.
type BranchResolver func(ctx context.Context, url, branch string, auth gitresolve.Auth) (string, error)

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

	// wake carries Stacks to reconcile now (a push to their repository).
	wake chan event.GenericEvent

	// conflictUntil delays the retry of an update that met a concurrent
	// update: conflicts are retried, not counted as failures.
	conflictUntil sync.Map // types.UID → time.Time
}

// SetupWithManager registers the controller and its watches.
func (r *StackReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Resolve == nil {
		r.Resolve = gitresolve.Branch
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	registerStackStates.Do(func() { metrics.Registry.MustRegister(stackStates{reader: mgr.GetClient()}) })
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &pulumiv1.Stack{}, prerequisiteField, func(o client.Object) []string {
		var names []string
		for _, p := range o.(*pulumiv1.Stack).Spec.Prerequisites {
			names = append(names, p.Name)
		}
		return names
	}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &pulumiv1.Stack{}, programRefField, func(o client.Object) []string {
		if ref := o.(*pulumiv1.Stack).Spec.ProgramRef; ref != nil {
			return []string{ref.Name}
		}
		return nil
	}); err != nil {
		return err
	}
	for field, names := range map[string]func(*pulumiv1.Stack) []string{configMapsField: referencedConfigMaps, secretsField: referencedSecrets, repositoryField: trackedRepository} {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), &pulumiv1.Stack{}, field, func(o client.Object) []string {
			return names(o.(*pulumiv1.Stack))
		}); err != nil {
			return err
		}
	}
	r.wake = make(chan event.GenericEvent, 4096)
	return ctrl.NewControllerManagedBy(mgr).
		For(&pulumiv1.Stack{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Owns(&autov1alpha1.Workspace{}).
		Owns(&autov1alpha1.Update{}).
		// A Stack's status change wakes the Stacks that list it as a
		// prerequisite.
		Watches(&pulumiv1.Stack{}, handler.EnqueueRequestsFromMapFunc(r.indexed(prerequisiteField))).
		// A Program's new artifact wakes the Stacks that use it.
		Watches(&pulumiv1.Program{}, handler.EnqueueRequestsFromMapFunc(r.indexed(programRefField))).
		// A ConfigMap or Secret a Stack refers to appearing or changing wakes it:
		// a Stack stalled on a missing reference recovers by itself.
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.indexed(configMapsField))).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.indexed(secretsField))).
		WatchesRawSource(source.Channel(r.wake, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Workers, 1)}).
		Complete(r)
}

// trackedRepository is the normalized repository of a Stack tracking a branch.
func trackedRepository(s *pulumiv1.Stack) []string {
	if s.Spec.GitSource == nil || s.Spec.ProjectRepo == "" || s.Spec.Branch == "" {
		return nil
	}
	return []string{gitresolve.NormalizeURL(s.Spec.ProjectRepo)}
}

// WakeRepository reconciles now every Stack tracking branch of the repository
// (given in any of its URL forms), and returns how many it woke.
func (r *StackReconciler) WakeRepository(ctx context.Context, urls []string, branch string) int {
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
			log.FromContext(ctx).Error(err, "Listing Stacks of a pushed repository failed")
			continue
		}
		for i := range list.Items {
			s := &list.Items[i]
			if strings.TrimPrefix(s.Spec.Branch, "refs/heads/") != branch {
				continue
			}
			select {
			case r.wake <- event.GenericEvent{Object: s}:
				n++
			case <-ctx.Done():
				return n
			}
		}
	}
	return n
}

// referencedConfigMaps lists the ConfigMaps a Stack reads.
func referencedConfigMaps(s *pulumiv1.Stack) []string {
	var names []string
	for _, ref := range s.Spec.ConfigRef {
		names = append(names, ref.Name)
	}
	return append(names, s.Spec.Envs...)
}

// referencedSecrets lists the Secrets a Stack reads.
func referencedSecrets(s *pulumiv1.Stack) []string {
	var names []string
	add := func(r *pulumiv1.ResourceRef) {
		if r != nil && r.SelectorType == pulumiv1.ResourceSelectorSecret && r.SecretRef != nil {
			names = append(names, r.SecretRef.Name)
		}
	}
	for _, r := range s.Spec.SecretRefs {
		add(&r)
	}
	for _, r := range s.Spec.EnvRefs {
		add(&r)
	}
	if s.Spec.GitSource != nil {
		if ga := s.Spec.GitAuth; ga != nil {
			add(ga.PersonalAccessToken)
			if ga.BasicAuth != nil {
				add(&ga.BasicAuth.UserName)
				add(&ga.BasicAuth.Password)
			}
			if ga.SSHAuth != nil {
				add(&ga.SSHAuth.SSHPrivateKey)
				add(ga.SSHAuth.Password)
			}
		}
		if s.Spec.GitAuthSecret != "" {
			names = append(names, s.Spec.GitAuthSecret)
		}
	}
	if s.Spec.AccessTokenSecret != "" {
		names = append(names, s.Spec.AccessTokenSecret)
	}
	return append(names, s.Spec.SecretEnvs...)
}

// indexed maps an object to the Stacks in its namespace whose index field
// names it.
func (r *StackReconciler) indexed(field string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list pulumiv1.StackList
		if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{field: o.GetName()}); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for _, s := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&s)})
		}
		return reqs
	}
}

// +kubebuilder:rbac:groups=pulumi.com,resources=stacks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=pulumi.com,resources=stacks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=pulumi.com,resources=stacks/finalizers,verbs=update
// +kubebuilder:rbac:groups=pulumi.com,resources=programs,verbs=get;list;watch
// +kubebuilder:rbac:groups=source.toolkit.fluxcd.io,resources=gitrepositories;ocirepositories;buckets,verbs=get;list;watch
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=workspaces;updates,verbs=get;list;watch;create;update;patch;delete

// Reconcile converges one Stack: finish the running update, resolve the
// source and inputs, decide, then wait for prerequisites and the workspace and
// start an update.
func (r *StackReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	s := &pulumiv1.Stack{}
	if err := r.Get(ctx, req.NamespacedName, s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	base := s.DeepCopy()
	defer func() {
		r.recordEvent(base, s)
		writeStatus(ctx, r.Client, base, s, !equality.Semantic.DeepEqual(base.Status, s.Status), &retErr)
	}()

	if !s.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	if controllerutil.AddFinalizer(s, StackFinalizer) {
		if err := r.Update(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	if running, res, err := r.reconcileCurrentUpdate(ctx, s); running || err != nil {
		return res, err
	}
	src, err := r.resolveSource(ctx, s)
	if err != nil {
		return r.stalledOrRetry(s, err, pulumiv1.StalledSourceUnavailableReason)
	}
	inputs, err := r.readInputs(ctx, s, src)
	if err != nil {
		return r.stalledOrRetry(s, err, pulumiv1.StalledSourceUnavailableReason)
	}
	ws, err := stack.Workspace(s, inputs)
	if err != nil {
		return r.stalledOrRetry(s, err, pulumiv1.StalledSpecInvalidReason)
	}
	return r.reconcileDecision(ctx, s, src, ws)
}

// reconcileDecision applies the policy's verdict.
func (r *StackReconciler) reconcileDecision(ctx context.Context, s *pulumiv1.Stack, src stack.Source, ws *autov1alpha1.Workspace) (ctrl.Result, error) {
	busy, drifted, err := r.finishDriftCheck(ctx, s)
	if err != nil || busy {
		// A drift check is running: nothing else runs on the stack meanwhile;
		// its Update's completion wakes the Stack.
		return ctrl.Result{}, err
	}
	now := r.Now()
	d := stack.Decide(stack.Input{Stack: s, Revision: src.Revision, Now: now})
	if drifted && s.Spec.DriftDetection.Remediate && d.Action == stack.UpToDate {
		d = stack.Decision{Action: stack.Run, UpdateType: autov1alpha1.UpType, Reason: "remediating drift"}
	}
	if until, ok := r.conflictUntil.Load(s.UID); ok && now.Before(until.(time.Time)) && d.Action == stack.Run {
		markReconciling(s, pulumiv1.ReconcilingRetryReason, "another update holds the stack; retrying shortly")
		return ctrl.Result{RequeueAfter: until.(time.Time).Sub(now)}, nil
	}
	switch d.Action {
	case stack.UpToDate:
		markReady(s)
		if res, started, err := r.reconcileDrift(ctx, s, src, ws); err != nil || started || (res.RequeueAfter > 0 && (d.RequeueAfter == 0 || res.RequeueAfter < d.RequeueAfter)) {
			return res, err
		}
		requeue := d.RequeueAfter
		if r.ResyncOverride > 0 && requeue > 0 {
			requeue = r.ResyncOverride
		}
		return r.reclaimWorkspace(ctx, s, requeue)
	case stack.Stall:
		markStalled(s, pulumiv1.StalledUpdateFailedReason, d.Reason)
		return ctrl.Result{}, nil
	case stack.Retry:
		markReconciling(s, pulumiv1.ReconcilingRetryReason, d.Reason)
		return ctrl.Result{RequeueAfter: d.RequeueAfter}, nil
	}
	if waiting, res, err := r.reconcilePrerequisites(ctx, s); waiting || err != nil {
		return res, err
	}
	ready, err := r.reconcileWorkspace(ctx, s, ws)
	if err != nil || !ready {
		return ctrl.Result{}, err
	}
	u, err := stack.Update(s, d.UpdateType, src.Revision, "Stackflow: "+d.Reason)
	if err != nil {
		return r.stalledOrRetry(s, err, pulumiv1.StalledSpecInvalidReason)
	}
	if drifted {
		refresh := true
		u.Spec.Refresh = &refresh
		u.Name += "-remediate"
	}
	if err := controllerutil.SetControllerReference(s, u, r.Scheme()); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, fmt.Errorf("create update: %w", err)
	}
	s.Status.CurrentUpdate = &pulumiv1.CurrentStackUpdate{
		Name: u.Name, Generation: s.Generation, Commit: src.Revision,
		ReconcileRequest: s.Annotations[pulumiv1.ReconcileRequestAnnotation],
	}
	markReconciling(s, pulumiv1.ReconcilingProcessingReason, fmt.Sprintf("%s %s running for %s (%s)", d.UpdateType, u.Name, shortRev(src.Revision), d.Reason))
	log.FromContext(ctx).Info("Started update", "update", u.Name, "type", d.UpdateType, "revision", src.Revision, "reason", d.Reason)
	// The Update's completion wakes the Stack through the Owns watch.
	return ctrl.Result{}, nil
}

// reconcileCurrentUpdate follows the update in flight; when it has ended,
// records its result and clears it. running reports an update still going.
func (r *StackReconciler) reconcileCurrentUpdate(ctx context.Context, s *pulumiv1.Stack) (bool, ctrl.Result, error) {
	cu := s.Status.CurrentUpdate
	if cu == nil {
		return false, ctrl.Result{}, nil
	}
	var u autov1alpha1.Update
	err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: cu.Name}, &u)
	if apierrors.IsNotFound(err) {
		s.Status.CurrentUpdate = nil // deleted before it finished: decide again
		return false, ctrl.Result{}, nil
	}
	if err != nil {
		return true, ctrl.Result{}, err
	}
	complete := apimeta.FindStatusCondition(u.Status.Conditions, autov1alpha1.UpdateConditionTypeComplete)
	if complete == nil || complete.Status != metav1.ConditionTrue {
		markReconciling(s, pulumiv1.ReconcilingProcessingReason, fmt.Sprintf("%s %s running for %s", u.Spec.Type, u.Name, shortRev(cu.Commit)))
		return true, ctrl.Result{}, nil
	}
	s.Status.CurrentUpdate = nil
	if complete.Reason == autov1alpha1.UpdateReasonConflict && u.Spec.Type != autov1alpha1.DestroyType {
		// Not a program failure: retry after a pause, without counting it.
		r.conflictUntil.Store(s.UID, r.Now().Add(stack.FirstRetry))
		if !s.Spec.RetryOnUpdateConflict {
			markStalled(s, pulumiv1.StalledConflictReason, "another update holds the stack: "+u.Status.Message+"; set retryOnUpdateConflict to retry automatically, or request a reconciliation")
			return true, ctrl.Result{}, nil
		}
		return false, ctrl.Result{}, nil
	}
	r.recordResult(ctx, s, cu, &u, complete)
	return false, ctrl.Result{}, nil
}

// recordResult writes lastUpdate and outputs from a finished Update.
func (r *StackReconciler) recordResult(ctx context.Context, s *pulumiv1.Stack, cu *pulumiv1.CurrentStackUpdate, u *autov1alpha1.Update, complete *metav1.Condition) {
	prev := s.Status.LastUpdate
	lu := &pulumiv1.StackUpdateState{
		Generation: cu.Generation, ReconcileRequest: cu.ReconcileRequest, Name: u.Name, Type: u.Spec.Type,
		Message: u.Status.Message, LastAttemptedCommit: cu.Commit, Permalink: pulumiv1.Permalink(u.Status.Permalink),
		LastResyncTime: u.Status.EndTime,
	}
	if lu.LastResyncTime.IsZero() {
		lu.LastResyncTime = metav1.NewTime(r.Now())
	}
	if prev != nil {
		lu.LastSuccessfulCommit = prev.LastSuccessfulCommit
	}
	if complete.Reason == autov1alpha1.UpdateReasonSucceeded {
		lu.State = pulumiv1.SucceededStackStateMessage
		if u.Spec.Type == autov1alpha1.UpType {
			lu.LastSuccessfulCommit = cu.Commit
			if u.Spec.Refresh != nil && *u.Spec.Refresh {
				// An up with refresh put the infrastructure back in line.
				apimeta.RemoveStatusCondition(&s.Status.Conditions, pulumiv1.DriftDetectedCondition)
			}
		}
		if u.Spec.Type == autov1alpha1.UpType || u.Spec.Type == autov1alpha1.RefreshType {
			if outs, err := r.readOutputs(ctx, u); err == nil {
				s.Status.Outputs = outs
			} else {
				log.FromContext(ctx).Error(err, "Reading stack outputs failed", "update", u.Name)
			}
		}
	} else {
		lu.State = pulumiv1.FailedStackStateMessage
		lu.Failures = 1
		// Consecutive failures of the same spec and revision count up; a
		// change starts the count again.
		if prev != nil && prev.State == pulumiv1.FailedStackStateMessage && prev.Generation == cu.Generation && prev.LastAttemptedCommit == cu.Commit {
			lu.Failures = prev.Failures + 1
		}
		stackFailuresTotal.Inc()
	}
	s.Status.LastUpdate = lu
}

// readOutputs reads an Update's outputs Secret, masking secret values.
func (r *StackReconciler) readOutputs(ctx context.Context, u *autov1alpha1.Update) (pulumiv1.StackOutputs, error) {
	if u.Status.Outputs == "" {
		return nil, nil
	}
	var sec corev1.Secret
	if err := r.Get(ctx, types.NamespacedName{Namespace: u.Namespace, Name: u.Status.Outputs}, &sec); err != nil {
		return nil, err
	}
	secret := map[string]bool{}
	var keys []string
	_ = jsonUnmarshal(sec.Annotations[SecretsAnnotation], &keys)
	for _, k := range keys {
		secret[k] = true
	}
	outs := pulumiv1.StackOutputs{}
	for k, v := range sec.Data {
		if secret[k] {
			outs[k] = jsonValue(`"[secret]"`)
			continue
		}
		outs[k] = jsonValue(string(v))
	}
	return outs, nil
}

// stalledOrRetry classifies an error: a spec the user must fix stalls; a
// missing source or reference stalls too, but is looked at again (it may
// appear); anything else is transient.
func (r *StackReconciler) stalledOrRetry(s *pulumiv1.Stack, err error, reason string) (ctrl.Result, error) {
	var specErr *stack.SpecError
	var srcErr *sourceError
	switch {
	case errors.As(err, &specErr):
		markStalled(s, pulumiv1.StalledSpecInvalidReason, err.Error())
		return ctrl.Result{}, nil
	case errors.As(err, &srcErr):
		markStalled(s, reason, err.Error())
		// Referenced objects wake the Stack when they appear; a repository or
		// branch is looked at again after a while.
		after := time.Minute
		if r.ResyncOverride > 0 {
			after = r.ResyncOverride
		}
		return ctrl.Result{RequeueAfter: after}, nil
	}
	return ctrl.Result{}, err
}

// reconcilePrerequisites waits until each prerequisite's last up succeeded
// (recently enough), asking stale ones to re-sync.
func (r *StackReconciler) reconcilePrerequisites(ctx context.Context, s *pulumiv1.Stack) (bool, ctrl.Result, error) {
	for _, p := range s.Spec.Prerequisites {
		var other pulumiv1.Stack
		err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: p.Name}, &other)
		if err != nil && !apierrors.IsNotFound(err) {
			return true, ctrl.Result{}, err
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
				return true, ctrl.Result{}, err
			}
		}
		markReconciling(s, pulumiv1.ReconcilingPrerequisiteNotSatisfiedReason, v.Message)
		// The prerequisite's status change wakes this Stack; the requeue
		// covers a prerequisite that does not exist yet.
		return true, ctrl.Result{RequeueAfter: 30 * time.Second}, nil
	}
	return false, ctrl.Result{}, nil
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

// reconcileWorkspace creates or updates the Stack's Workspace and reports
// whether it is ready for the current spec.
func (r *StackReconciler) reconcileWorkspace(ctx context.Context, s *pulumiv1.Stack, want *autov1alpha1.Workspace) (bool, error) {
	if err := controllerutil.SetControllerReference(s, want, r.Scheme()); err != nil {
		return false, err
	}
	var cur autov1alpha1.Workspace
	err := r.Get(ctx, client.ObjectKeyFromObject(want), &cur)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.Create(ctx, want); err != nil {
			return false, fmt.Errorf("create workspace: %w", err)
		}
		markReconciling(s, pulumiv1.ReconcilingProcessingReason, "waiting for the workspace to be created and ready")
		return false, nil
	case err != nil:
		return false, err
	}
	if !equality.Semantic.DeepEqual(cur.Spec, want.Spec) || !equality.Semantic.DeepEqual(cur.Labels, want.Labels) {
		cur.Spec, cur.Labels = want.Spec, want.Labels
		if want.Annotations != nil {
			cur.Annotations = want.Annotations
		}
		if err := r.Update(ctx, &cur); err != nil {
			return false, fmt.Errorf("update workspace: %w", err)
		}
		markReconciling(s, pulumiv1.ReconcilingProcessingReason, "waiting for the workspace to apply the new spec")
		return false, nil
	}
	ready := apimeta.FindStatusCondition(cur.Status.Conditions, autov1alpha1.WorkspaceReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || cur.Status.ObservedGeneration != cur.Generation {
		msg := "waiting for the workspace"
		if ready != nil {
			msg += ": " + ready.Message
		}
		if stalled := apimeta.FindStatusCondition(cur.Status.Conditions, autov1alpha1.WorkspaceStalled); stalled != nil && stalled.Status == metav1.ConditionTrue {
			reason := pulumiv1.StalledWorkspaceFailedReason
			if stalled.Reason == autov1alpha1.WorkspaceReasonSourceUnavailable {
				reason = pulumiv1.StalledSourceUnavailableReason
			}
			markStalled(s, reason, "workspace failed: "+stalled.Message)
			return false, nil
		}
		markReconciling(s, pulumiv1.ReconcilingProcessingReason, msg)
		return false, nil
	}
	return true, nil
}

// reclaimWorkspace deletes the Workspace of an up-to-date Stack whose
// workspaceReclaimPolicy is Delete.
func (r *StackReconciler) reclaimWorkspace(ctx context.Context, s *pulumiv1.Stack, requeue time.Duration) (ctrl.Result, error) {
	if s.Spec.WorkspaceReclaimPolicy == pulumiv1.WorkspaceReclaimDelete {
		ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}}
		if err := r.Delete(ctx, ws); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, err
		}
	}
	// Waiting for the next resync of a tracked branch (0: only on change).
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// reconcileDelete destroys the stack's resources when destroyOnFinalize asks,
// then removes the Workspace and the finalizer. Prerequisites never block it.
func (r *StackReconciler) reconcileDelete(ctx context.Context, s *pulumiv1.Stack) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(s, StackFinalizer) {
		return ctrl.Result{}, nil
	}
	// An update in flight (even the first) may be creating resources: wait for
	// it, then destroy.
	if s.Spec.DestroyOnFinalize && (s.Status.LastUpdate != nil || s.Status.CurrentUpdate != nil) {
		done, res, err := r.reconcileDestroy(ctx, s)
		if !done || err != nil {
			return res, err
		}
	}
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}}
	if err := r.Delete(ctx, ws); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, err
	}
	controllerutil.RemoveFinalizer(s, StackFinalizer)
	if err := r.Update(ctx, s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, nil
}

// reconcileDestroy runs (and waits for) a destroy update.
func (r *StackReconciler) reconcileDestroy(ctx context.Context, s *pulumiv1.Stack) (bool, ctrl.Result, error) {
	if running, res, err := r.reconcileCurrentUpdate(ctx, s); running || err != nil {
		return false, res, err
	}
	lu := s.Status.LastUpdate
	if lu != nil && lu.Type == autov1alpha1.DestroyType && lu.State == pulumiv1.SucceededStackStateMessage {
		return true, ctrl.Result{}, nil
	}
	if lu != nil && lu.Type == autov1alpha1.DestroyType && lu.State == pulumiv1.FailedStackStateMessage {
		wait := stack.Backoff(lu.Failures, 5*time.Minute)
		if due := lu.LastResyncTime.Add(wait); r.Now().Before(due) {
			markStalled(s, pulumiv1.StalledDestroyFailedReason, fmt.Sprintf("destroy failed (attempt %d): %s; retrying in %s, the finalizer is kept until it succeeds", lu.Failures, lu.Message, due.Sub(r.Now()).Round(time.Second)))
			return false, ctrl.Result{RequeueAfter: due.Sub(r.Now())}, nil
		}
	}
	// Destroy from the source the stack was last deployed from when the
	// current one cannot be resolved.
	src, err := r.resolveSource(ctx, s)
	if err != nil && s.Spec.GitSource != nil && lu != nil && lu.LastSuccessfulCommit != "" {
		src, err = r.gitSource(ctx, s, lu.LastSuccessfulCommit)
	}
	if err != nil {
		markStalled(s, pulumiv1.StalledDestroyFailedReason, "cannot destroy: "+err.Error())
		return false, ctrl.Result{RequeueAfter: time.Minute}, nil
	}
	inputs, err := r.readInputs(ctx, s, src)
	if err != nil {
		markStalled(s, pulumiv1.StalledDestroyFailedReason, "cannot destroy: "+err.Error())
		return false, ctrl.Result{RequeueAfter: time.Minute}, nil
	}
	ws, err := stack.Workspace(s, inputs)
	if err != nil {
		markStalled(s, pulumiv1.StalledDestroyFailedReason, "cannot destroy: "+err.Error())
		return false, ctrl.Result{}, nil
	}
	ready, err := r.reconcileWorkspace(ctx, s, ws)
	if err != nil || !ready {
		markReconciling(s, pulumiv1.ReconcilingDeletingReason, "destroying: waiting for the workspace")
		return false, ctrl.Result{RequeueAfter: 5 * time.Second}, err
	}
	u, err := stack.Update(s, autov1alpha1.DestroyType, src.Revision, "Stackflow: destroy on finalize")
	if err != nil {
		return false, ctrl.Result{}, err
	}
	if err := controllerutil.SetControllerReference(s, u, r.Scheme()); err != nil {
		return false, ctrl.Result{}, err
	}
	if err := r.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
		return false, ctrl.Result{}, fmt.Errorf("create destroy update: %w", err)
	}
	s.Status.CurrentUpdate = &pulumiv1.CurrentStackUpdate{Name: u.Name, Generation: s.Generation, Commit: src.Revision}
	markReconciling(s, pulumiv1.ReconcilingDeletingReason, fmt.Sprintf("destroying the stack's resources (%s)", u.Name))
	return false, ctrl.Result{}, nil
}
