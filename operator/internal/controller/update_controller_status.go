package controller

import (
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
)

// An Update keeps PKO's conditions: Progressing while the run goes,
// Complete once it has ended whatever its result, and Failed when it did not
// succeed. Its outcomes are spelled on them: waiting is NotStarted (for its
// workspace) or Progressing (the run goes); up to date is the run's end,
// recorded by markEnded; an Update never stalls as an outcome (a run that
// cannot start ends, and its Stack decides what next). Beside them, and
// derived from them in one place (markUpdateKstatus), it carries kstatus's:
// Reconciling while it waits or runs, Ready once it succeeded, Stalled once it
// failed (it never runs again), with PKO's reasons and messages; so Argo CD's
// generic checks, Flux's health checks and kubectl wait read a running Update
// as in progress, not Current.

// updateConditions spells kstatus on an Update; Ready's reason is PKO's.
var updateConditions = kstatusConditions{reconciling: true}

// markNotStarted: the Update waits to start.
func markNotStarted(u *autov1alpha1.Update, msg string) {
	setCondition(u, autov1alpha1.UpdateConditionTypeProgressing, metav1.ConditionFalse, autov1alpha1.UpdateReasonNotStarted, msg)
	setCondition(u, autov1alpha1.UpdateConditionTypeComplete, metav1.ConditionFalse, autov1alpha1.UpdateReasonNotStarted, msg)
	markUpdateKstatus(u)
	u.Status.ObservedGeneration = u.Generation
}

// markProgressing: the run goes.
func markProgressing(u *autov1alpha1.Update, msg string) {
	setCondition(u, autov1alpha1.UpdateConditionTypeProgressing, metav1.ConditionTrue, autov1alpha1.UpdateReasonProgressing, msg)
	setCondition(u, autov1alpha1.UpdateConditionTypeComplete, metav1.ConditionFalse, autov1alpha1.UpdateReasonProgressing, msg)
	markUpdateKstatus(u)
	u.Status.ObservedGeneration = u.Generation
}

// markEnded: the run ended, for reason.
func markEnded(u *autov1alpha1.Update, reason string, failed bool, msg string) {
	f := metav1.ConditionFalse
	if failed {
		f = metav1.ConditionTrue
	}
	setCondition(u, autov1alpha1.UpdateConditionTypeProgressing, metav1.ConditionFalse, reason, msg)
	setCondition(u, autov1alpha1.UpdateConditionTypeFailed, f, reason, msg)
	setCondition(u, autov1alpha1.UpdateConditionTypeComplete, metav1.ConditionTrue, reason, msg)
	markUpdateKstatus(u)
	u.Status.ObservedGeneration = u.Generation
}

// markUpdateKstatus sets an Update's kstatus conditions from PKO's, which
// stay as PKO writes them: ended, Ready (succeeded) or Stalled (failed);
// otherwise Reconciling, for Progressing's reason. An Update without PKO's
// conditions (never reconciled) is left alone.
func markUpdateKstatus(u *autov1alpha1.Update) {
	complete := apimeta.FindStatusCondition(u.Status.Conditions, autov1alpha1.UpdateConditionTypeComplete)
	if complete == nil {
		return
	}
	switch {
	case complete.Status == metav1.ConditionTrue && apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeFailed):
		updateConditions.markStalled(u, complete.Reason, complete.Message)
	case complete.Status == metav1.ConditionTrue:
		updateConditions.markReady(u, complete.Reason, complete.Message)
	default:
		c := apimeta.FindStatusCondition(u.Status.Conditions, autov1alpha1.UpdateConditionTypeProgressing)
		if c == nil {
			c = complete
		}
		updateConditions.markReconciling(u, c.Reason, c.Message)
	}
}

// updateStatus writes a reconcile's outcome in an Update's status; a
// transient error leaves it as it was. Up to date (the run ended) adds the
// kstatus conditions to an Update that ended before they were written.
var updateStatus = spelling[*autov1alpha1.Update]{
	ready: func(u *autov1alpha1.Update, _ string) { markUpdateKstatus(u) },
	waiting: func(u *autov1alpha1.Update, reason, msg string) {
		if reason == autov1alpha1.UpdateReasonProgressing {
			markProgressing(u, msg)
			return
		}
		markNotStarted(u, msg)
	},
}

// finisher ends every Update reconcile (see finisher).
func (r *UpdateReconciler) finisher() *finisher[*autov1alpha1.Update] {
	return &finisher[*autov1alpha1.Update]{kind: "update", client: r.Client, recorder: r.Recorder, spell: updateStatus, report: reportUpdate}
}

// reportUpdate reports a run that started (a Normal event) or ended (an
// event, Warning unless it succeeded, and the update metrics), once the
// Update's status stores it.
func reportUpdate(rec record.EventRecorder, before, after *autov1alpha1.Update) {
	conds := func(u *autov1alpha1.Update, typ string) bool {
		return apimeta.IsStatusConditionTrue(u.Status.Conditions, typ)
	}
	if !conds(before, autov1alpha1.UpdateConditionTypeProgressing) && conds(after, autov1alpha1.UpdateConditionTypeProgressing) {
		c := apimeta.FindStatusCondition(after.Status.Conditions, autov1alpha1.UpdateConditionTypeProgressing)
		rec.Event(after, corev1.EventTypeNormal, c.Reason, c.Message)
	}
	if conds(before, autov1alpha1.UpdateConditionTypeComplete) || !conds(after, autov1alpha1.UpdateConditionTypeComplete) {
		return
	}
	c := apimeta.FindStatusCondition(after.Status.Conditions, autov1alpha1.UpdateConditionTypeComplete)
	typ := corev1.EventTypeNormal
	if conds(after, autov1alpha1.UpdateConditionTypeFailed) {
		typ = corev1.EventTypeWarning
	}
	rec.Event(after, typ, c.Reason, c.Message)
	result := updateResults[c.Reason]
	if result == "" {
		result = "failed"
	}
	updatesTotal.WithLabelValues(string(after.Spec.Type), result).Inc()
	updateDuration.WithLabelValues(string(after.Spec.Type), result).Observe(after.Status.EndTime.Sub(after.Status.StartTime.Time).Seconds())
}

// updateResults labels the update metrics by the run's end.
var updateResults = map[string]string{
	autov1alpha1.UpdateReasonSucceeded: "succeeded", autov1alpha1.UpdateReasonFailed: "failed",
	autov1alpha1.UpdateReasonConflict: "conflict", autov1alpha1.UpdateReasonCanceled: "canceled",
	autov1alpha1.UpdateReasonStackNotFound: "stack_not_found", autov1alpha1.UpdateReasonAborted: "aborted",
}
