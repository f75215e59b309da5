package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/gitresolve"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
)

var glueNow = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func glueStack() *pulumiv1.Stack {
	return &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", Generation: 4, UID: "uid-1"},
		Spec: pulumiv1.StackSpec{Stack: "dev"}}
}

// TestSummarize: each way a reconcile ends maps to one kstatus state and
// requeue.
func TestSummarize(t *testing.T) {
	r := &StackReconciler{}
	for _, tc := range []struct {
		name                 string
		err                  error
		deleting             bool
		ready                metav1.ConditionStatus
		reconciling, stalled string
		requeue              time.Duration
		wantErr              bool
	}{
		{"up to date", upToDate(time.Minute), false, metav1.ConditionTrue, "", "", time.Minute, false},
		{"stalling keeps looking", &stallingError{reason: pulumiv1.StalledUpdateFailedReason, msg: "failed 5 times", requeue: time.Hour}, false, metav1.ConditionFalse, "", pulumiv1.StalledUpdateFailedReason, time.Hour, false},
		{"waiting", &waitingError{reason: pulumiv1.ReconcilingRetryReason, msg: "retrying in 10s", requeue: 10 * time.Second}, false, metav1.ConditionFalse, pulumiv1.ReconcilingRetryReason, "", 10 * time.Second, false},
		{"waiting while deleting", &waitingError{reason: pulumiv1.ReconcilingProcessingReason, msg: "up x running"}, true, metav1.ConditionFalse, pulumiv1.ReconcilingDeletingReason, "", 0, false},
		{"transient", errors.New("etcd timed out"), false, metav1.ConditionFalse, pulumiv1.ReconcilingTransientErrorReason, "", 0, true},
		{"conflict requeues quietly", apierrors.NewConflict(schema.GroupResource{Resource: "stacks"}, "app", errors.New("modified")), false, "", "", "", time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := glueStack()
			if tc.deleting {
				now := metav1.Now()
				s.DeletionTimestamp = &now
			}
			res, err := r.finisher().summarize(s, tc.err)
			res, err = quiet(context.Background(), res, err)
			if (err != nil) != tc.wantErr || res.RequeueAfter != tc.requeue {
				t.Fatalf("summarize = %+v, %v", res, err)
			}
			ready := apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.ReadyCondition)
			if tc.ready == "" {
				if ready != nil {
					t.Fatalf("conditions set on a conflict: %+v", s.Status.Conditions)
				}
				return
			}
			if ready == nil || ready.Status != tc.ready {
				t.Fatalf("Ready = %+v", ready)
			}
			rec := apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.ReconcilingCondition)
			st := apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.StalledCondition)
			if (tc.reconciling == "") != (rec == nil) || (rec != nil && rec.Reason != tc.reconciling) {
				t.Fatalf("Reconciling = %+v, want %q", rec, tc.reconciling)
			}
			if (tc.stalled == "") != (st == nil) || (st != nil && st.Reason != tc.stalled) {
				t.Fatalf("Stalled = %+v, want %q", st, tc.stalled)
			}
			if tc.stalled != "" && s.Status.ObservedGeneration != s.Generation {
				t.Fatal("a stall must record the generation it judged")
			}
		})
	}
}

// TestClassifySourceError: unavailable sources and references stall, an
// unreachable one waits with the resolver's backoff, others are transient.
func TestClassifySourceError(t *testing.T) {
	r := &StackReconciler{}
	s := glueStack()
	var stalling *stallingError
	var waiting *waitingError
	if err := r.classifySourceError(s, sourceErrorf("configmap x not found")); !errors.As(err, &stalling) || stalling.reason != pulumiv1.StalledSourceUnavailableReason || stalling.requeue != time.Minute {
		t.Fatalf("missing reference: %#v", err)
	}
	if err := r.classifySourceError(s, &stack.SpecError{Msg: "bad"}); !errors.As(err, &stalling) || stalling.reason != pulumiv1.StalledSpecInvalidReason {
		t.Fatalf("spec error: %#v", err)
	}
	unreachable := &unreachableError{err: fmt.Errorf("resolve: %w", &gitresolve.RetryError{Err: errors.New("connection refused"), After: 40 * time.Second})}
	if err := r.classifySourceError(s, unreachable); !errors.As(err, &waiting) || waiting.reason != pulumiv1.ReconcilingSourceUnreachableReason || waiting.requeue != 40*time.Second || !strings.Contains(waiting.msg, "connection refused") {
		t.Fatalf("unreachable: %#v", err)
	}
	other := errors.New("the API server is down")
	if err := r.classifySourceError(s, other); err != other {
		t.Fatalf("transient: %#v", err)
	}
}

// TestCreateErrorInTerminatingNamespace: Kubernetes' refusal in a namespace
// being deleted stalls the Stack with the way out.
func TestCreateErrorInTerminatingNamespace(t *testing.T) {
	s := glueStack()
	now := metav1.Now()
	s.DeletionTimestamp = &now
	s.Spec.DestroyOnFinalize = true
	refused := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonForbidden, Code: 403,
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause, Message: "namespace ns is being terminated"}}}}}
	var stalling *stallingError
	err := createError(s, "update", refused)
	if !errors.As(err, &stalling) || stalling.reason != pulumiv1.StalledNamespaceTerminatingReason ||
		!strings.Contains(stalling.msg, "were NOT destroyed") || !strings.Contains(stalling.msg, "kubectl patch stack app -n ns --type=merge") {
		t.Fatalf("createError = %v", err)
	}
	if err := createError(s, "update", apierrors.NewForbidden(schema.GroupResource{Resource: "updates"}, "x", errors.New("rbac"))); errors.As(err, &stalling) {
		t.Fatal("any other refusal is not a terminating namespace")
	}
}

// TestWorkspaceReadiness: what a Stack makes of its Workspace's status. A
// condition counts only for the generation it observed: a Workspace stalled
// on the checkout of the previous commit, whose spec the Stack has just moved
// to a fixing commit, is waited for, not a reason to stall the Stack at its
// new generation.
func TestWorkspaceReadiness(t *testing.T) {
	cond := func(typ string, status metav1.ConditionStatus, reason, msg string, gen int64) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen}
	}
	readyAt := func(gen int64) metav1.Condition {
		return cond(autov1alpha1.WorkspaceReady, metav1.ConditionTrue, autov1alpha1.WorkspaceReasonRunning, "agent ready", gen)
	}
	checkoutFailedAt := func(gen int64) []metav1.Condition {
		return []metav1.Condition{
			cond(autov1alpha1.WorkspaceReady, metav1.ConditionFalse, autov1alpha1.WorkspaceReasonSourceUnavailable, "checkout of 1111111: no such commit", gen),
			cond(autov1alpha1.WorkspaceStalled, metav1.ConditionTrue, autov1alpha1.WorkspaceReasonSourceUnavailable, "checkout of 1111111: no such commit", gen),
		}
	}
	for _, tc := range []struct {
		name       string
		generation int64
		observed   int64
		conds      []metav1.Condition
		// want: "" ready, else "stalled <reason>" or "waiting"; msg a part
		// of the message.
		want, msg string
	}{
		{name: "ready at its generation", generation: 2, observed: 2, conds: []metav1.Condition{readyAt(2)}},
		{name: "ready for the previous spec", generation: 3, observed: 2, conds: []metav1.Condition{readyAt(2)},
			want: "waiting", msg: "waiting for the workspace to apply its new spec (generation 3)"},
		{name: "ready condition current, observedGeneration not yet", generation: 3, observed: 2, conds: []metav1.Condition{readyAt(3)},
			want: "waiting", msg: "waiting for the workspace: agent ready"},
		{name: "not reconciled yet", generation: 1, want: "waiting", msg: "waiting for the workspace"},
		{name: "failing while Kubernetes retries", generation: 2, observed: 2,
			conds: []metav1.Condition{cond(autov1alpha1.WorkspaceReady, metav1.ConditionFalse, "CrashLoopBackOff", "pulumi: CrashLoopBackOff", 2)},
			want:  "waiting", msg: "waiting for the workspace: pulumi: CrashLoopBackOff"},
		{name: "initializing", generation: 2, observed: 1,
			conds: []metav1.Condition{cond(autov1alpha1.WorkspaceReady, metav1.ConditionFalse, autov1alpha1.WorkspaceReasonInitializing, "installing dependencies", 2)},
			want:  "waiting", msg: "waiting for the workspace: installing dependencies"},
		{name: "checkout failed at its generation", generation: 2, observed: 1, conds: checkoutFailedAt(2),
			want: "stalled " + pulumiv1.StalledSourceUnavailableReason, msg: "workspace failed: checkout of 1111111: no such commit"},
		{name: "installation failed at its generation", generation: 2, observed: 1,
			conds: []metav1.Condition{cond(autov1alpha1.WorkspaceStalled, metav1.ConditionTrue, autov1alpha1.WorkspaceReasonInstallationFailed, "npm install failed", 2)},
			want:  "stalled " + pulumiv1.StalledWorkspaceFailedReason, msg: "workspace failed: npm install failed"},
		{name: "a stack's creation kept failing (the lock a killed init left)", generation: 2, observed: 1,
			conds: []metav1.Condition{cond(autov1alpha1.WorkspaceStalled, metav1.ConditionTrue, autov1alpha1.WorkspaceReasonConfigurationFailed,
				"configure stack dev: select stack dev: could not create stack: the stack is currently locked by 1 lock(s) (6 failed attempts since 2026-12-01T12:00:00Z; next at 2026-12-01T12:05:15Z)", 2)},
			want: "stalled " + pulumiv1.StalledWorkspaceFailedReason, msg: "workspace failed: configure stack dev: select stack dev: could not create stack: the stack is currently locked"},
		{name: "checkout failed for the previous spec (the fix is on its way)", generation: 3, observed: 1, conds: checkoutFailedAt(2),
			want: "waiting", msg: "waiting for the workspace to apply its new spec (generation 3)"},
		{name: "stalled without observedGeneration", generation: 3, observed: 1,
			conds: []metav1.Condition{cond(autov1alpha1.WorkspaceStalled, metav1.ConditionTrue, autov1alpha1.WorkspaceReasonInstallationFailed, "npm install failed", 0)},
			want:  "waiting", msg: "waiting for the workspace to apply its new spec (generation 3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Name: "app", Generation: tc.generation},
				Status: autov1alpha1.WorkspaceStatus{ObservedGeneration: tc.observed, Conditions: tc.conds}}
			err := workspaceReadiness(ws)
			var stalling *stallingError
			var waiting *waitingError
			got := ""
			switch {
			case err == nil:
			case errors.As(err, &stalling):
				got = "stalled " + stalling.reason
			case errors.As(err, &waiting):
				got = "waiting"
				if waiting.reason != pulumiv1.ReconcilingProcessingReason {
					t.Errorf("waiting reason %s", waiting.reason)
				}
			default:
				t.Fatalf("unexpected error %v", err)
			}
			if got != tc.want {
				t.Fatalf("workspaceReadiness = %q (%v), want %q", got, err, tc.want)
			}
			if tc.msg != "" && !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("message %q lacks %q", err, tc.msg)
			}
		})
	}
}

// TestRecordResult: conflicts, failures and drift checks land in their own
// status fields.
func TestRecordResult(t *testing.T) {
	r := &StackReconciler{Recorder: record.NewFakeRecorder(10), Now: func() time.Time { return glueNow }}
	done := func(reason string, changes map[string]int64) (*autov1alpha1.Update, *metav1.Condition) {
		u := &autov1alpha1.Update{ObjectMeta: metav1.ObjectMeta{Name: "app-7"}, Spec: autov1alpha1.UpdateSpec{Type: autov1alpha1.UpType}}
		u.Status.Message, u.Status.Changes = "msg", changes
		u.Status.EndTime = metav1.NewTime(glueNow)
		return u, &metav1.Condition{Type: autov1alpha1.UpdateConditionTypeComplete, Status: metav1.ConditionTrue, Reason: reason}
	}
	cu := &pulumiv1.CurrentStackUpdate{Name: "app-7", Number: 7, Purpose: pulumiv1.UpdatePurposeDeploy, Generation: 4, Commit: "abc", InputsDigest: "d"}
	ctx := context.Background()

	s := glueStack()
	prev := &pulumiv1.StackUpdateState{Name: "app-6", State: pulumiv1.SucceededStackStateMessage, Type: "up"}
	s.Status.LastUpdate = prev
	u, c := done(autov1alpha1.UpdateReasonConflict, nil)
	r.recordResult(ctx, s, cu, u, c)
	if s.Status.LastUpdate != prev || s.Status.Conflict == nil || s.Status.Conflict.Count != 1 || s.Status.Conflict.Revision != "abc" || s.Status.Conflict.Update != "app-7" {
		t.Fatalf("conflict recorded as %+v / %+v", s.Status.LastUpdate, s.Status.Conflict)
	}
	r.recordResult(ctx, s, cu, u, c)
	if s.Status.Conflict.Count != 2 {
		t.Fatal("conflicts in a row count up")
	}

	u, c = done(autov1alpha1.UpdateReasonFailed, nil)
	r.recordResult(ctx, s, cu, u, c)
	r.recordResult(ctx, s, cu, u, c)
	if s.Status.Conflict != nil || s.Status.LastUpdate.State != pulumiv1.FailedStackStateMessage || s.Status.LastUpdate.Failures != 2 || s.Status.LastUpdate.InputsDigest != "d" {
		t.Fatalf("failure recorded as %+v / %+v", s.Status.LastUpdate, s.Status.Conflict)
	}

	// A drift check: never replaces lastUpdate; remediation pending only
	// with remediate.
	last := s.Status.LastUpdate
	dcu := &pulumiv1.CurrentStackUpdate{Name: "app-8", Number: 8, Purpose: pulumiv1.UpdatePurposeDriftCheck, Commit: "abc"}
	for _, remediate := range []bool{false, true} {
		s.Spec.DriftDetection = &pulumiv1.DriftDetection{Remediate: remediate}
		u, c = done(autov1alpha1.UpdateReasonSucceeded, map[string]int64{"update": 1, "same": 3})
		u.Name = "app-8"
		r.recordResult(ctx, s, dcu, u, c)
		if s.Status.LastUpdate != last || s.Status.DriftCheck.Update != "app-8" || s.Status.DriftCheck.Changes["update"] != 1 ||
			s.Status.DriftCheck.RemediationPending != remediate || !apimeta.IsStatusConditionTrue(s.Status.Conditions, pulumiv1.DriftDetectedCondition) {
			t.Fatalf("remediate %v: drift check recorded as %+v, %+v", remediate, s.Status.DriftCheck, s.Status.Conditions)
		}
	}
	u, c = done(autov1alpha1.UpdateReasonSucceeded, map[string]int64{"same": 4})
	r.recordResult(ctx, s, dcu, u, c)
	if s.Status.DriftCheck.RemediationPending || apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.DriftDetectedCondition) != nil {
		t.Fatal("a clean check must clear the drift and the pending remediation")
	}
}

// TestRecorded: which Updates the status has recorded (and may be released).
func TestRecorded(t *testing.T) {
	s := glueStack()
	s.Status.UpdateSequence = 5
	s.Status.CurrentUpdate = &pulumiv1.CurrentStackUpdate{Name: "app-5", Number: 5}
	upd := func(name, n string, complete bool) *autov1alpha1.Update {
		u := &autov1alpha1.Update{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{stack.AnnotationNumber: n}}}
		if complete {
			u.Status.Conditions = []metav1.Condition{{Type: autov1alpha1.UpdateConditionTypeComplete, Status: metav1.ConditionTrue, Reason: "x"}}
		}
		return u
	}
	for _, tc := range []struct {
		u    *autov1alpha1.Update
		want bool
	}{
		{upd("app-4", "4", true), true},
		{upd("app-4", "4", false), false},
		{upd("app-5", "5", true), false}, // current: not recorded yet
		{upd("app-6", "6", true), false}, // started by a reconcile whose status was not written
	} {
		if got := recorded(s, tc.u); got != tc.want {
			t.Errorf("recorded(%s) = %v, want %v", tc.u.Name, got, tc.want)
		}
	}
}

// TestDriftCheckOnly: a drift check in flight leaves the Stack Ready only
// while it wants nothing else.
func TestDriftCheckOnly(t *testing.T) {
	cu := &pulumiv1.CurrentStackUpdate{Name: "app-3", Purpose: pulumiv1.UpdatePurposeDriftCheck}
	s := glueStack()
	s.Status.LastUpdate = &pulumiv1.StackUpdateState{Generation: s.Generation, Type: "up", State: pulumiv1.SucceededStackStateMessage}
	if !driftCheckOnly(s, cu) {
		t.Fatal("a check of an up-to-date Stack")
	}
	s.Generation++
	if driftCheckOnly(s, cu) {
		t.Fatal("a new generation must not be reported Ready while a check runs")
	}
	s.Generation--
	s.Annotations = map[string]string{pulumiv1.ReconcileRequestAnnotation: "now"}
	if driftCheckOnly(s, cu) {
		t.Fatal("a new reconcile request must not be reported handled while a check runs")
	}
	if driftCheckOnly(glueStack(), &pulumiv1.CurrentStackUpdate{Purpose: pulumiv1.UpdatePurposeDeploy}) {
		t.Fatal("a deploy is not a check")
	}
}
