package controller

import (
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
)

// workspaceConditions: a Workspace spells kstatus with PKO's Ready and
// Stalled only; Ready's reason says what it waits for (Initializing,
// ConnectionFailed, …) or why it failed.
var workspaceConditions = kstatusConditions{}

// workspaceStatus writes a reconcile's outcome in a Workspace's status. A
// transient error leaves its conditions as they were (Stacks and Updates
// wait on Ready: a serving agent is not made unready by an API server's
// hiccup), but while it is deleted, where Ready says Deleting.
var workspaceStatus = spelling[*autov1alpha1.Workspace]{
	ready: func(ws *autov1alpha1.Workspace, msg string) {
		workspaceConditions.markReady(ws, autov1alpha1.WorkspaceReasonRunning, msg)
		ws.Status.ObservedGeneration = ws.Generation
	},
	waiting: func(ws *autov1alpha1.Workspace, reason, msg string) {
		workspaceConditions.markReconciling(ws, reason, msg)
	},
	stalled: func(ws *autov1alpha1.Workspace, reason, msg string) {
		workspaceConditions.markStalled(ws, reason, msg)
		// The spec was processed to a verdict someone must act on: kstatus
		// reads Failed only for the generation it observed.
		ws.Status.ObservedGeneration = ws.Generation
	},
	transient: func(ws *autov1alpha1.Workspace, _ error) {
		if !ws.DeletionTimestamp.IsZero() {
			workspaceConditions.markReconciling(ws, autov1alpha1.WorkspaceReasonDeleting, workspaceDeletingMessage)
		}
	},
}

// finisher ends every Workspace reconcile (see finisher).
func (r *WorkspaceReconciler) finisher() *finisher[*autov1alpha1.Workspace] {
	return &finisher[*autov1alpha1.Workspace]{kind: "workspace", client: r.Client, recorder: r.Recorder, spell: workspaceStatus, report: reportWorkspace}
}

// reportWorkspace sends the event a change of the Workspace's conditions
// calls for (workspaceEvent).
func reportWorkspace(rec record.EventRecorder, before, after *autov1alpha1.Workspace) {
	if typ, reason, msg, ok := workspaceEvent(before.Status.Conditions, after.Status.Conditions); ok {
		rec.Event(after, typ, reason, msg)
	}
}

// workspaceEvent is the event a change of the Workspace's conditions calls
// for: a Warning when it starts failing, fails for another reason, or stalls;
// a Normal one when it is running again after a failure. Nothing when the
// reason and stalled-ness are unchanged, so a failure that persists through
// many reconciles is reported once.
func workspaceEvent(before, after []metav1.Condition) (typ, reason, msg string, ok bool) {
	was, wasStalled, wasFailing := workspaceState(before)
	now, stalled, failing := workspaceState(after)
	switch {
	case failing && (!wasFailing || now.Reason != was.Reason || stalled != wasStalled):
		return corev1.EventTypeWarning, now.Reason, now.Message, true
	case wasFailing && now != nil && now.Status == metav1.ConditionTrue:
		return corev1.EventTypeNormal, now.Reason, now.Message, true
	}
	return "", "", "", false
}

// workspaceState is the Ready condition (nil when absent), whether the
// Workspace is stalled, and whether Ready says it fails.
func workspaceState(conds []metav1.Condition) (ready *metav1.Condition, stalled, failing bool) {
	ready = apimeta.FindStatusCondition(conds, autov1alpha1.WorkspaceReady)
	stalled = apimeta.IsStatusConditionTrue(conds, autov1alpha1.WorkspaceStalled)
	if ready == nil || ready.Status == metav1.ConditionTrue {
		return ready, stalled, false
	}
	switch ready.Reason {
	case autov1alpha1.WorkspaceReasonInitializing, autov1alpha1.WorkspaceReasonDeleting:
		return ready, stalled, false
	}
	return ready, stalled, true
}
