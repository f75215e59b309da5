package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/workspace"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

func stepUpdate() *autov1alpha1.Update {
	return &autov1alpha1.Update{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app-1", Generation: 1, UID: "update-uid"},
		Spec:       autov1alpha1.UpdateSpec{WorkspaceName: "app", StackName: "dev", Type: autov1alpha1.UpType},
	}
}

// newUpdateReconciler is an Update reconciler on e with its followers.
func newUpdateReconciler(t *testing.T, e *stepEnv) *UpdateReconciler {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &UpdateReconciler{Client: e.c, Recorder: e.events, Agents: e.pool, Now: e.clock,
		followers: &followers{ctx: ctx, active: map[types.UID]bool{}, done: make(chan event.GenericEvent, 16)}}
}

// TestUpdateSteps walks one Update through its reconciler's steps — waiting
// for its workspace, refused by a busy agent, started, followed, ended with
// outputs, deleted after its TTL — one Reconcile each, against an
// in-process agent. After each step the stored status says what happened,
// the events and metrics report each transition once, and kstatus agrees
// with the conditions.
func TestUpdateSteps(t *testing.T) {
	u := stepUpdate()
	e := newStepEnv(t, u)
	r := newUpdateReconciler(t, e)
	ctx := context.Background()
	var read kstatus.Status
	reconcile := func(step string) time.Duration {
		t.Helper()
		res := e.reconcile(t, r, u)
		read = kstatusConforms(t, u)
		t.Logf("%s: requeue %s, kstatus %s, %s", step, res.RequeueAfter, read, conditionsOf(u))
		return res.RequeueAfter
	}
	// kstatusIs: kstatus (Argo CD's generic checks, Flux, kubectl wait) read
	// the Update as want after the last step.
	kstatusIs := func(step string, want kstatus.Status) {
		t.Helper()
		if read != want {
			t.Fatalf("%s: kstatus reads %s, want %s", step, read, want)
		}
	}
	progressing, complete, failed := autov1alpha1.UpdateConditionTypeProgressing, autov1alpha1.UpdateConditionTypeComplete, autov1alpha1.UpdateConditionTypeFailed
	ready, reconciling, stalled := autov1alpha1.UpdateConditionTypeReady, autov1alpha1.UpdateConditionTypeReconciling, autov1alpha1.UpdateConditionTypeStalled
	notStarted := func(step string) {
		t.Helper()
		conditionIs(t, u, progressing, metav1.ConditionFalse, autov1alpha1.UpdateReasonNotStarted)
		conditionIs(t, u, complete, metav1.ConditionFalse, autov1alpha1.UpdateReasonNotStarted)
		conditionIs(t, u, ready, metav1.ConditionFalse, autov1alpha1.UpdateReasonNotStarted)
		conditionIs(t, u, reconciling, metav1.ConditionTrue, autov1alpha1.UpdateReasonNotStarted)
		kstatusIs(step, kstatus.InProgressStatus)
		if ev := e.drainEvents(); len(ev) != 0 {
			t.Fatalf("%s: events %q", step, ev)
		}
	}

	// No workspace yet: the Workspace watch wakes the Update.
	if after := reconcile("no workspace"); after != 0 {
		t.Fatalf("no workspace: requeue %s", after)
	}
	notStarted("no workspace")

	// The workspace exists, not ready.
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", Generation: 1, UID: "ws-uid"}}
	if err := e.c.Create(ctx, ws); err != nil {
		t.Fatal(err)
	}
	tok := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: workspace.TokenSecretName(ws)}, Data: map[string][]byte{pod.TokenSecretKey: []byte("ws-token")}}
	if err := e.c.Create(ctx, tok); err != nil {
		t.Fatal(err)
	}
	reconcile("workspace not ready")
	notStarted("workspace not ready")
	if c := findCondition(u, progressing); c.Message != "waiting for workspace app to be ready" {
		t.Fatalf("message %q", c.Message)
	}

	// Ready, but the agent applies configuration again: asked again soon.
	workspaceConditions.markReady(ws, autov1alpha1.WorkspaceReasonRunning, "agent ready")
	ws.Status.ObservedGeneration, ws.Status.Address = 1, "app.ns:50051"
	if err := e.c.Status().Update(ctx, ws); err != nil {
		t.Fatal(err)
	}
	e.agent.do(func(a *fakeAgent) {
		a.startErr = status.Error(codes.FailedPrecondition, "the workspace is applying stack configuration")
	})
	if after := reconcile("agent busy"); after != 3*time.Second {
		t.Fatalf("agent busy: requeue %s", after)
	}
	notStarted("agent busy")

	// Started: Progressing, followed, and reported once.
	e.agent.do(func(a *fakeAgent) { a.startErr = nil })
	if after := reconcile("started"); after != 2*time.Minute {
		t.Fatalf("started: requeue %s", after)
	}
	conditionIs(t, u, progressing, metav1.ConditionTrue, autov1alpha1.UpdateReasonProgressing)
	conditionIs(t, u, complete, metav1.ConditionFalse, autov1alpha1.UpdateReasonProgressing)
	conditionIs(t, u, ready, metav1.ConditionFalse, autov1alpha1.UpdateReasonProgressing)
	conditionIs(t, u, reconciling, metav1.ConditionTrue, autov1alpha1.UpdateReasonProgressing)
	kstatusIs("started", kstatus.InProgressStatus)
	if ev := e.drainEvents(); len(ev) != 1 || ev[0] != "Normal Progressing up of stack dev running in workspace app" {
		t.Fatalf("events = %q", ev)
	}
	e.agent.do(func(a *fakeAgent) {
		if len(a.starts) != 2 || a.starts[1].GetUpdateId() != "update-uid" || a.starts[1].GetStackName() != "dev" ||
			a.starts[1].GetType() != agentv1.OperationType_OPERATION_TYPE_UP {
			t.Fatalf("starts = %v", a.starts)
		}
		if !a.bearers["ws-token"] || len(a.bearers) != 1 {
			t.Fatalf("the agent was called with %d tokens, not (only) the workspace's", len(a.bearers))
		}
	})
	if !u.Status.StartTime.Time.Equal(time.Date(2026, 12, 1, 12, 0, 1, 0, time.UTC)) {
		t.Fatalf("startTime = %s, want the agent's", u.Status.StartTime)
	}
	substrate.Eventually(t, 10*time.Second, "the follower to watch the run", func() (bool, error) {
		n := 0
		e.agent.do(func(a *fakeAgent) { n = a.watches })
		return n == 1, fmt.Errorf("%d watches", n)
	})

	// Woken while it runs: nothing changes, nothing is reported.
	rv := u.ResourceVersion
	reconcile("still running")
	kstatusIs("still running", kstatus.InProgressStatus)
	if u.ResourceVersion != rv {
		t.Fatal("the status was rewritten while nothing changed")
	}
	if ev := e.drainEvents(); len(ev) != 0 {
		t.Fatalf("events while running: %q", ev)
	}

	// The run ends: the follower wakes the Update, which records the end,
	// its outputs and the agent's notice.
	succeeded := testutil.ToFloat64(updatesTotal.WithLabelValues("up", "succeeded"))
	end := time.Date(2026, 12, 1, 12, 0, 5, 0, time.UTC)
	e.agent.end("update-uid", &agentv1.Operation{State: agentv1.OperationState_OPERATION_STATE_SUCCEEDED, Message: "update succeeded",
		EndTimeUnixNano: end.UnixNano(), Changes: map[string]int64{"create": 1}, ChangedResources: []string{"create urn:pulumi:dev::p::r::x"},
		Notices: []string{"removed a stale lock"},
		Outputs: map[string]*agentv1.Output{"url": {ValueJson: `"https://x"`}, "password": {ValueJson: `"s3cr3t"`, Secret: true}}})
	select {
	case ev := <-r.followers.done:
		if ev.Object.GetName() != u.Name {
			t.Fatalf("the follower woke %s", ev.Object.GetName())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follower did not wake the Update when its run ended")
	}
	if after := reconcile("ended"); after != end.Add(DefaultUpdateTTL).Sub(e.now) {
		t.Fatalf("ended: requeue %s, want the TTL's end", after)
	}
	conditionIs(t, u, complete, metav1.ConditionTrue, autov1alpha1.UpdateReasonSucceeded)
	conditionIs(t, u, failed, metav1.ConditionFalse, autov1alpha1.UpdateReasonSucceeded)
	conditionIs(t, u, progressing, metav1.ConditionFalse, autov1alpha1.UpdateReasonSucceeded)
	conditionIs(t, u, ready, metav1.ConditionTrue, autov1alpha1.UpdateReasonSucceeded)
	conditionIs(t, u, reconciling, "", "")
	conditionIs(t, u, stalled, "", "")
	kstatusIs("ended", kstatus.CurrentStatus)
	if u.Status.Message != "removed a stale lock; update succeeded" || u.Status.Changes["create"] != 1 || len(u.Status.Resources) != 1 ||
		!u.Status.EndTime.Time.Equal(end) || u.Status.Outputs != "app-1-stack-outputs" {
		t.Fatalf("status = %+v", u.Status)
	}
	var outs corev1.Secret
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: u.Status.Outputs}, &outs); err != nil {
		t.Fatal(err)
	}
	if string(outs.Data["url"]) != `"https://x"` || outs.Annotations[SecretsAnnotation] != `["password"]` || !metav1.IsControlledBy(&outs, u) {
		t.Fatalf("outputs Secret = %+v", outs)
	}
	ev := e.drainEvents()
	if len(ev) != 2 || ev[0] != "Normal UpdateSucceeded removed a stale lock; update succeeded" || ev[1] != "Warning StaleLockRecovered removed a stale lock" {
		t.Fatalf("events = %q", ev)
	}
	if got := testutil.ToFloat64(updatesTotal.WithLabelValues("up", "succeeded")); got != succeeded+1 {
		t.Fatalf("stackflow_updates_total{up,succeeded} went from %v to %v", succeeded, got)
	}

	// Woken again: the end is not recorded, reported or counted twice.
	reconcile("ended, again")
	if ev := e.drainEvents(); len(ev) != 0 {
		t.Fatalf("events after the end: %q", ev)
	}
	if got := testutil.ToFloat64(updatesTotal.WithLabelValues("up", "succeeded")); got != succeeded+1 {
		t.Fatalf("the end counted twice: %v", got)
	}

	// Past its TTL: deleted.
	e.now = end.Add(DefaultUpdateTTL + time.Second)
	if _, err := r.Reconcile(ctx, ctrlRequest(u)); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(u), &autov1alpha1.Update{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after its TTL: %v", err)
	}
}

// TestUpdateAbortedWhenItsWorkspaceGoes: a running Update whose workspace
// is deleted ends Aborted (never left Progressing), and waits for its TTL.
func TestUpdateAbortedWhenItsWorkspaceGoes(t *testing.T) {
	u := stepUpdate()
	markProgressing(u, runningMessage(u))
	e := newStepEnv(t, u)
	r := newUpdateReconciler(t, e)
	res := e.reconcile(t, r, u)
	if got := kstatusConforms(t, u); got != kstatus.FailedStatus {
		t.Fatalf("kstatus reads %s, want %s", got, kstatus.FailedStatus)
	}
	conditionIs(t, u, autov1alpha1.UpdateConditionTypeComplete, metav1.ConditionTrue, autov1alpha1.UpdateReasonAborted)
	conditionIs(t, u, autov1alpha1.UpdateConditionTypeFailed, metav1.ConditionTrue, autov1alpha1.UpdateReasonAborted)
	conditionIs(t, u, autov1alpha1.UpdateConditionTypeStalled, metav1.ConditionTrue, autov1alpha1.UpdateReasonAborted)
	conditionIs(t, u, autov1alpha1.UpdateConditionTypeReady, metav1.ConditionFalse, autov1alpha1.UpdateReasonAborted)
	if res.RequeueAfter != DefaultUpdateTTL {
		t.Fatalf("requeue %s, want the TTL", res.RequeueAfter)
	}
	if ev := e.drainEvents(); len(ev) != 1 || ev[0] != "Warning Aborted workspace app was deleted while the update ran" {
		t.Fatalf("events = %q", ev)
	}
}

// TestUpdateLostRaceReportsNothing: the Update's status write is locked. A
// reconcile that worked from a copy another writer has since changed (a
// cache behind a Stack's release of its finalizer) writes nothing, reports
// nothing and counts nothing, and runs again quietly — an unlocked write
// would have recorded, reported and counted the run's end on a stale copy.
func TestUpdateLostRaceReportsNothing(t *testing.T) {
	u := stepUpdate()
	markProgressing(u, runningMessage(u))
	e := newStepEnv(t, u)
	r := newUpdateReconciler(t, e)
	ctx := context.Background()
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
		t.Fatal(err)
	}
	other := u.DeepCopy()
	other.Annotations = map[string]string{"meanwhile": "another writer"}
	if err := e.c.Update(ctx, other); err != nil {
		t.Fatal(err)
	}
	counted := testutil.ToFloat64(updatesTotal.WithLabelValues("up", "succeeded"))
	base := u.DeepCopy()
	markEnded(u, autov1alpha1.UpdateReasonSucceeded, false, "update succeeded")
	res, err := r.finisher().finish(ctx, base, u, errUpToDate)
	if err != nil || res.RequeueAfter != conflictRetry {
		t.Fatalf("finish = %+v, %v; want a quiet requeue after %s", res, err, conflictRetry)
	}
	if ev := e.drainEvents(); len(ev) != 0 {
		t.Fatalf("events from a lost write: %q", ev)
	}
	if got := testutil.ToFloat64(updatesTotal.WithLabelValues("up", "succeeded")); got != counted {
		t.Fatal("a lost write was counted")
	}
	var stored autov1alpha1.Update
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(u), &stored); err != nil {
		t.Fatal(err)
	}
	if c := findCondition(&stored, autov1alpha1.UpdateConditionTypeComplete); c == nil || c.Status != metav1.ConditionFalse {
		t.Fatalf("the stale copy's status was written: %+v", stored.Status.Conditions)
	}
}

// TestUpdateKstatus: an Update spells kstatus beside PKO's conditions, which
// stay as PKO writes them: kstatus reads it InProgress while it waits or
// runs, Current once it succeeded, Failed once it failed — whatever the
// failure. An Update that ended before the kstatus conditions were written
// (an older operator) gets them when it is next reconciled.
func TestUpdateKstatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		mark func(u *autov1alpha1.Update)
		want kstatus.Status
		// ready is Ready's status; reconciling and stalled whether they are
		// there (True); reason the reason all three carry.
		ready                metav1.ConditionStatus
		reconciling, stalled bool
		reason               string
	}{
		{"waiting for its workspace", func(u *autov1alpha1.Update) { markNotStarted(u, "waiting for workspace app to exist") },
			kstatus.InProgressStatus, metav1.ConditionFalse, true, false, autov1alpha1.UpdateReasonNotStarted},
		{"running", func(u *autov1alpha1.Update) { markProgressing(u, runningMessage(u)) },
			kstatus.InProgressStatus, metav1.ConditionFalse, true, false, autov1alpha1.UpdateReasonProgressing},
		{"succeeded", func(u *autov1alpha1.Update) {
			markEnded(u, autov1alpha1.UpdateReasonSucceeded, false, "update succeeded")
		},
			kstatus.CurrentStatus, metav1.ConditionTrue, false, false, autov1alpha1.UpdateReasonSucceeded},
		{"failed", func(u *autov1alpha1.Update) { markEnded(u, autov1alpha1.UpdateReasonFailed, true, "exit status 1") },
			kstatus.FailedStatus, metav1.ConditionFalse, false, true, autov1alpha1.UpdateReasonFailed},
		{"met another run's lock", func(u *autov1alpha1.Update) { markEnded(u, autov1alpha1.UpdateReasonConflict, true, "locked") },
			kstatus.FailedStatus, metav1.ConditionFalse, false, true, autov1alpha1.UpdateReasonConflict},
		{"running, then succeeded", func(u *autov1alpha1.Update) {
			markProgressing(u, runningMessage(u))
			markEnded(u, autov1alpha1.UpdateReasonSucceeded, false, "update succeeded")
		}, kstatus.CurrentStatus, metav1.ConditionTrue, false, false, autov1alpha1.UpdateReasonSucceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := stepUpdate()
			tc.mark(u)
			if got := kstatusConforms(t, u); got != tc.want {
				t.Fatalf("kstatus reads %s, want %s", got, tc.want)
			}
			conditionIs(t, u, autov1alpha1.UpdateConditionTypeReady, tc.ready, tc.reason)
			for typ, there := range map[string]bool{autov1alpha1.UpdateConditionTypeReconciling: tc.reconciling, autov1alpha1.UpdateConditionTypeStalled: tc.stalled} {
				if there {
					conditionIs(t, u, typ, metav1.ConditionTrue, tc.reason)
				} else {
					conditionIs(t, u, typ, "", "")
				}
			}
		})
	}

	t.Run("ended before the kstatus conditions", func(t *testing.T) {
		u := stepUpdate()
		u.Status.EndTime = metav1.NewTime(time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC))
		for _, c := range []struct {
			typ    string
			status metav1.ConditionStatus
		}{{autov1alpha1.UpdateConditionTypeProgressing, metav1.ConditionFalse}, {autov1alpha1.UpdateConditionTypeFailed, metav1.ConditionTrue}, {autov1alpha1.UpdateConditionTypeComplete, metav1.ConditionTrue}} {
			setCondition(u, c.typ, c.status, autov1alpha1.UpdateReasonFailed, "exit status 1")
		}
		u.Status.ObservedGeneration = 1
		e := newStepEnv(t, u)
		e.reconcile(t, newUpdateReconciler(t, e), u)
		if got := kstatusConforms(t, u); got != kstatus.FailedStatus {
			t.Fatalf("kstatus reads %s, want %s", got, kstatus.FailedStatus)
		}
		if ev := e.drainEvents(); len(ev) != 0 {
			t.Fatalf("the run's end was reported again: %q", ev)
		}
	})
}

// exitsSaying is an ExitReporter answering why, recording what it was asked.
type exitsSaying struct {
	why   string
	asked []string
}

func (x *exitsSaying) AgentExit(_ context.Context, ws *autov1alpha1.Workspace, since time.Time) (string, error) {
	x.asked = append(x.asked, ws.Namespace+"/"+ws.Name+" since "+since.UTC().Format(time.RFC3339))
	return x.why, nil
}

// TestUpdateGoneWithItsAgentSaysWhy: a running Update whose agent no longer
// knows the run (the workspace container restarted) ends Aborted saying why
// the agent ended, as the runtime tells it — an OOM kill of the container,
// agent included, which the agent itself could not report — and only that
// the workspace restarted when the runtime cannot tell.
func TestUpdateGoneWithItsAgentSaysWhy(t *testing.T) {
	const oom = "OOMKilled: the workspace container, its agent included, was killed at 2026-12-01T12:00:03Z for exceeding its memory limit of 64 MiB (raise workspaceTemplate.spec.resources.limits.memory)"
	for _, tc := range []struct {
		name, why, want string
	}{
		{"the runtime tells", oom, oom + "; the run is gone: workspace app restarted before the update reported a result"},
		{"the runtime cannot tell", "", "the run is gone: workspace app restarted or was replaced before the update reported a result"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := stepUpdate()
			u.CreationTimestamp = metav1.NewTime(time.Date(2026, 12, 1, 11, 59, 0, 0, time.UTC))
			markProgressing(u, runningMessage(u))
			ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", Generation: 1, UID: "ws-uid"}}
			workspaceConditions.markReady(ws, autov1alpha1.WorkspaceReasonRunning, "agent ready")
			ws.Status.ObservedGeneration, ws.Status.Address = 1, "app.ns:50051"
			tok := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: workspace.TokenSecretName(ws)}, Data: map[string][]byte{pod.TokenSecretKey: []byte("ws-token")}}
			e := newStepEnv(t, u, ws, tok)
			r := newUpdateReconciler(t, e)
			exits := &exitsSaying{why: tc.why}
			r.Exits = exits
			e.reconcile(t, r, u)
			conditionIs(t, u, autov1alpha1.UpdateConditionTypeComplete, metav1.ConditionTrue, autov1alpha1.UpdateReasonAborted)
			if u.Status.Message != tc.want {
				t.Fatalf("message %q, want %q", u.Status.Message, tc.want)
			}
			if len(exits.asked) != 1 || exits.asked[0] != "ns/app since 2026-12-01T11:59:00Z" {
				t.Fatalf("the runtime was asked %q, want once about ns/app since the Update's creation", exits.asked)
			}
		})
	}
}
