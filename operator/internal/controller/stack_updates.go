package controller

import (
	"context"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
)

// startUpdate is the one place a Stack starts an Update. The Update is
// number status.updateSequence+1, named from it, and carries the facts it was
// decided on; a reconcile that created it but could not record it (a failed
// status write, an operator that stopped) finds it again by that name and
// adopts it, so an update is never started twice. It ends the reconcile: the
// Update's completion wakes the Stack (Owns).
func (r *StackReconciler) startUpdate(ctx context.Context, sc *stackScope, p stack.Plan, why string) error {
	s := sc.stack
	p.Number = s.Status.UpdateSequence + 1
	u, err := stack.Update(s, p)
	if err != nil {
		return &stallingError{reason: pulumiv1.StalledSpecInvalidReason, msg: err.Error()}
	}
	if err := controllerutil.SetControllerReference(s, u, r.Scheme()); err != nil {
		return err
	}
	// The decision was made on the Stack as cached: make sure that is the
	// stored Stack, so a stale cache cannot start again an update that was
	// already started, recorded and deleted.
	if err := r.cacheBehind(ctx, s); err != nil {
		return err
	}
	err = r.Create(ctx, u)
	if apierrors.IsAlreadyExists(err) {
		var existing autov1alpha1.Update
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(u), &existing); err != nil {
			return err
		}
		if !metav1.IsControlledBy(&existing, s) {
			return fmt.Errorf("update %s exists and does not belong to this Stack (delete it, or wait for the garbage collector to remove what is left of a former Stack of this name)", u.Name)
		}
		u = &existing
	} else if err != nil {
		return createError(s, "update", err)
	}
	cu := r.adopt(s, u)
	log.FromContext(ctx).Info("Started update", "update", u.Name, "type", u.Spec.Type, "purpose", cu.Purpose, "revision", cu.Commit, "reason", why)
	if driftCheckOnly(s, cu) {
		// See reconcileCurrentUpdate: the Stack stays Ready during a check.
		return errUpToDate
	}
	return &waitingError{reason: pulumiv1.ReconcilingProcessingReason, msg: fmt.Sprintf("%s %s running for %s (%s)", u.Spec.Type, u.Name, shortRev(cu.Commit), why)}
}

// cacheBehind reads the stored Stack around the cache: errStale (nothing is
// written and the reconcile runs again shortly) when the cached s is not the
// stored one, errGone when the Stack is gone (its deletion event follows),
// nil when s is the stored Stack.
func (r *StackReconciler) cacheBehind(ctx context.Context, s *pulumiv1.Stack) error {
	var stored pulumiv1.Stack
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s), &stored); err != nil {
		if apierrors.IsNotFound(err) {
			return errGone
		}
		return err
	}
	if stored.ResourceVersion != s.ResourceVersion {
		return errStale
	}
	return nil
}

// driftCheckOnly: the update in flight is a drift check and the Stack wants
// nothing else yet — the spec and reconcile request its last update ran for
// are current — so it is still Ready. A new generation or request waits for
// the check to end and is not reported Ready meanwhile.
func driftCheckOnly(s *pulumiv1.Stack, cu *pulumiv1.CurrentStackUpdate) bool {
	lu := s.Status.LastUpdate
	return cu.Purpose == pulumiv1.UpdatePurposeDriftCheck && s.DeletionTimestamp.IsZero() && lu != nil &&
		lu.Generation == s.Generation && s.Annotations[pulumiv1.ReconcileRequestAnnotation] == lu.ReconcileRequest
}

// adopt makes u the Stack's current update, from the facts it carries.
func (r *StackReconciler) adopt(s *pulumiv1.Stack, u *autov1alpha1.Update) *pulumiv1.CurrentStackUpdate {
	cu := stack.Current(u)
	s.Status.CurrentUpdate = &cu
	s.Status.UpdateSequence = max(s.Status.UpdateSequence, cu.Number)
	if cu.Purpose == pulumiv1.UpdatePurposeRemediate && s.Status.DriftCheck != nil {
		// The remediation is under way: it is not pending any more.
		s.Status.DriftCheck.RemediationPending = false
	}
	return &cu
}

// reconcileCurrentUpdate follows the update in flight; when it has ended, it
// records its result and clears it.
func (r *StackReconciler) reconcileCurrentUpdate(ctx context.Context, sc *stackScope) error {
	s := sc.stack
	if s.Status.CurrentUpdate == nil {
		// An Update created but not recorded (see startUpdate) is adopted.
		var u autov1alpha1.Update
		err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: stack.UpdateName(s, s.Status.UpdateSequence+1)}, &u)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if !metav1.IsControlledBy(&u, s) {
			return nil
		}
		// Usually the Update's creation woke this reconcile before the
		// cache saw the status write that recorded it: the stored Stack
		// then has it, and the cache catches up (the write's event wakes
		// the Stack again). Adopted only when the stored Stack lacks it
		// too (a write that failed, an operator that stopped).
		if err := r.cacheBehind(ctx, s); err != nil {
			return err
		}
		r.adopt(s, &u)
		log.FromContext(ctx).Info("Adopted an update started but not recorded", "update", u.Name)
	}
	cu := s.Status.CurrentUpdate
	var u autov1alpha1.Update
	err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: cu.Name}, &u)
	if apierrors.IsNotFound(err) {
		// Not in this shard's cache: running or ended under the Stack's
		// former shard (stack_shard.go).
		if err := r.currentUpdateElsewhere(ctx, s, cu.Name); err != nil {
			return err
		}
		// The result finalizer keeps an Update until it is recorded: only a
		// forced removal gets here. Decide again.
		log.FromContext(ctx).Info("The current update is gone without a result; deciding again", "update", cu.Name)
		s.Status.CurrentUpdate = nil
		return nil
	}
	if err != nil {
		return err
	}
	// An Update runs once: Complete records that run, whatever became of
	// its spec afterwards, so it is read whatever generation it observed
	// (unlike a Workspace's conditions, conditions.Current).
	complete := apimeta.FindStatusCondition(u.Status.Conditions, autov1alpha1.UpdateConditionTypeComplete)
	if complete == nil || complete.Status != metav1.ConditionTrue {
		if driftCheckOnly(s, cu) {
			// A drift check observes and changes nothing: the Stack stays
			// Ready meanwhile (Argo CD does not see it progress every few
			// minutes); nothing else runs until it ends and wakes the Stack.
			return errUpToDate
		}
		return &waitingError{reason: pulumiv1.ReconcilingProcessingReason, msg: fmt.Sprintf("%s %s running for %s", u.Spec.Type, u.Name, shortRev(cu.Commit))}
	}
	r.recordResult(ctx, s, cu, &u, complete)
	s.Status.CurrentUpdate = nil
	return nil
}

// recordResult records a finished Update: a drift check in driftCheck, a
// conflict in conflict, anything else in lastUpdate (and outputs).
func (r *StackReconciler) recordResult(ctx context.Context, s *pulumiv1.Stack, cu *pulumiv1.CurrentStackUpdate, u *autov1alpha1.Update, complete *metav1.Condition) {
	if cu.Purpose == pulumiv1.UpdatePurposeDriftCheck {
		r.recordDriftCheck(ctx, s, cu, u, complete)
		return
	}
	if cu.Purpose == pulumiv1.UpdatePurposePlan {
		// A plan preview changes nothing: it is recorded in status.plan,
		// never as the last update.
		r.recordPlanPreview(ctx, s, cu, u, complete.Reason == autov1alpha1.UpdateReasonSucceeded)
		return
	}
	if complete.Reason == autov1alpha1.UpdateReasonConflict && u.Spec.Type != autov1alpha1.DestroyType {
		// Not a program failure: retried (or stalled) without counting.
		s.Status.Conflict = &pulumiv1.StackConflict{
			Update: u.Name, Time: endTime(u, metav1.NewTime(r.Now())), Message: u.Status.Message,
			Count:      stack.ConflictCount(s.Status.Conflict, cu.Generation, cu.Commit, cu.InputsDigest, cu.ReconcileRequest),
			Generation: cu.Generation, Revision: cu.Commit, InputsDigest: cu.InputsDigest, ReconcileRequest: cu.ReconcileRequest,
		}
		return
	}
	s.Status.Conflict = nil
	prev := s.Status.LastUpdate
	lu := &pulumiv1.StackUpdateState{
		Generation: cu.Generation, ReconcileRequest: cu.ReconcileRequest, Name: u.Name, Type: u.Spec.Type,
		Message: u.Status.Message, LastAttemptedCommit: cu.Commit, Permalink: pulumiv1.Permalink(u.Status.Permalink),
		LastResyncTime: endTime(u, metav1.NewTime(r.Now())), InputsDigest: cu.InputsDigest,
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
		// Consecutive failures of the same spec, revision and inputs count
		// up; a change starts the count again.
		lu.Failures = stack.Failures(prev, cu.Generation, cu.Commit, cu.InputsDigest)
	}
	s.Status.LastUpdate = lu
	if u.Spec.PlanSecretName != "" {
		recordPlanApply(s, u, complete.Reason)
	}
}

func endTime(u *autov1alpha1.Update, now metav1.Time) metav1.Time {
	if u.Status.EndTime.IsZero() {
		return now
	}
	return u.Status.EndTime
}

// readOutputs reads an Update's outputs Secret, masking secret values.
func (r *StackReconciler) readOutputs(ctx context.Context, u *autov1alpha1.Update) (pulumiv1.StackOutputs, error) {
	if u.Status.Outputs == "" {
		return nil, nil
	}
	raw, err := r.rawOutputs(ctx, u)
	if err != nil {
		return nil, err
	}
	outs := pulumiv1.StackOutputs{}
	for k, v := range raw.Values {
		if raw.Secrets[k] {
			outs[k] = jsonValue(`"[secret]"`)
			continue
		}
		outs[k] = jsonValue(string(v))
	}
	return outs, nil
}

// getWritten reads an object an Update's run wrote just before it
// completed (its outputs or plan Secret): the cache may not have it yet, so
// one not found there is read from the API server.
func (r *StackReconciler) getWritten(ctx context.Context, key types.NamespacedName, obj client.Object) error {
	err := r.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) && r.APIReader != nil {
		err = r.APIReader.Get(ctx, key, obj)
	}
	return err
}

// ownedUpdates lists the Stack's Updates from the cache.
func (r *StackReconciler) ownedUpdates(ctx context.Context, s *pulumiv1.Stack) ([]autov1alpha1.Update, error) {
	var list autov1alpha1.UpdateList
	if err := r.List(ctx, &list, client.InNamespace(s.Namespace), client.MatchingLabels{stack.StackNameLabel: s.Name}); err != nil {
		return nil, err
	}
	var owned []autov1alpha1.Update
	for _, u := range list.Items {
		if metav1.IsControlledBy(&u, s) {
			owned = append(owned, u)
		}
	}
	return owned, nil
}

// releaseUpdates removes the result finalizer from the Updates whose results
// the Stack's (stored) status has recorded — finished, numbered at most
// status.updateSequence, not current and, with spec.exports, exported — so
// their TTL can delete them (with their outputs Secret); and
// deletes the finished drift checks but the last, so a Stack checking drift
// every few minutes does not pile them up. With all, every Update is released
// (the Stack is going).
func (r *StackReconciler) releaseUpdates(ctx context.Context, s *pulumiv1.Stack, all ...bool) error {
	updates, err := r.ownedUpdates(ctx, s)
	if err != nil {
		return err
	}
	everything := len(all) > 0 && all[0]
	for i := range updates {
		u := &updates[i]
		if !everything && (!recorded(s, u) || exportDueFor(s, u)) {
			continue
		}
		if !everything && u.Annotations[stack.AnnotationPurpose] == string(pulumiv1.UpdatePurposeDriftCheck) &&
			(s.Status.DriftCheck == nil || s.Status.DriftCheck.Update != u.Name) && u.DeletionTimestamp.IsZero() {
			if err := r.Delete(ctx, u); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("delete old drift check %s: %w", u.Name, err)
			}
		}
		if controllerutil.ContainsFinalizer(u, stack.ResultFinalizer) {
			patch := client.MergeFrom(u.DeepCopy())
			controllerutil.RemoveFinalizer(u, stack.ResultFinalizer)
			if err := r.Patch(ctx, u, patch); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("release update %s: %w", u.Name, err)
			}
		}
	}
	if everything {
		return nil
	}
	return r.pruneUpdates(ctx, s, updates)
}

// DefaultUpdateHistory is how many finished Updates a Stack keeps by default
// (--update-history): a Stack that deploys every few minutes shows a short
// list in Argo CD's tree and kubectl, not a day of them.
const DefaultUpdateHistory = 10

// pruneUpdates deletes a Stack's finished, recorded Updates beyond the
// newest UpdateHistory (their TTL bounds their age; this bounds their
// number). The Updates its status names — the last, the current, the drift
// check, the plan's preview and apply, the export's — are kept whatever
// their number, and so is one whose export is due.
func (r *StackReconciler) pruneUpdates(ctx context.Context, s *pulumiv1.Stack, updates []autov1alpha1.Update) error {
	limit := r.UpdateHistory
	if limit <= 0 {
		return nil
	}
	for _, name := range stack.PrunableUpdates(s, updates, limit) {
		u := &autov1alpha1.Update{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name}}
		if err := r.Delete(ctx, u); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete update %s beyond the history of %d: %w", name, limit, err)
		}
	}
	return nil
}

// recorded: the Stack's status holds the Update's result.
func recorded(s *pulumiv1.Stack, u *autov1alpha1.Update) bool {
	if !apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeComplete) {
		return false
	}
	if cu := s.Status.CurrentUpdate; cu != nil && cu.Name == u.Name {
		return false
	}
	n, err := strconv.ParseInt(u.Annotations[stack.AnnotationNumber], 10, 64)
	// Updates started by an operator without numbers had nothing to record
	// them by: they are released.
	return err != nil || n <= s.Status.UpdateSequence
}
