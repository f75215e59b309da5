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
		{"up to date", errUpToDate, false, metav1.ConditionTrue, "", "", time.Minute, false},
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
			sc := &stackScope{stack: s, requeue: time.Minute}
			res, err := r.summarize(sc, tc.err)
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

// TestWorkspaceReadiness maps a Workspace's conditions onto the Stack.
func TestWorkspaceReadiness(t *testing.T) {
	ws := func(conds ...metav1.Condition) *autov1alpha1.Workspace {
		w := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
		w.Status.ObservedGeneration = 2
		w.Status.Conditions = conds
		return w
	}
	ready := metav1.Condition{Type: autov1alpha1.WorkspaceReady, Status: metav1.ConditionTrue, Reason: "Running"}
	notReady := metav1.Condition{Type: autov1alpha1.WorkspaceReady, Status: metav1.ConditionFalse, Reason: "CrashLoopBackOff", Message: "pulumi: CrashLoopBackOff"}
	stalledSrc := metav1.Condition{Type: autov1alpha1.WorkspaceStalled, Status: metav1.ConditionTrue, Reason: "SourceUnavailable", Message: "commit 0123 not found"}
	stalledOther := metav1.Condition{Type: autov1alpha1.WorkspaceStalled, Status: metav1.ConditionTrue, Reason: "InstallationFailed", Message: "pulumi install failed"}
	if err := workspaceReadiness(ws(ready)); err != nil {
		t.Fatal(err)
	}
	var waiting *waitingError
	var stalling *stallingError
	if err := workspaceReadiness(ws(notReady)); !errors.As(err, &waiting) || !strings.Contains(waiting.msg, "waiting for the workspace: pulumi: CrashLoopBackOff") {
		t.Fatalf("not ready: %v", err)
	}
	if err := workspaceReadiness(ws(notReady, stalledSrc)); !errors.As(err, &stalling) || stalling.reason != pulumiv1.StalledSourceUnavailableReason {
		t.Fatalf("source unavailable: %v", err)
	}
	if err := workspaceReadiness(ws(notReady, stalledOther)); !errors.As(err, &stalling) || stalling.reason != pulumiv1.StalledWorkspaceFailedReason || !strings.Contains(stalling.msg, "pulumi install failed") {
		t.Fatalf("workspace failed: %v", err)
	}
	stale := ws(ready)
	stale.Generation = 3
	if err := workspaceReadiness(stale); !errors.As(err, &waiting) {
		t.Fatal("a Workspace that has not seen its spec is not ready")
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
