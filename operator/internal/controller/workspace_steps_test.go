package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/workspace"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

// TestWorkspaceSteps walks one Workspace through its reconciler's steps —
// token, runtime, agent, in-place checkout, configuration, ready, a new
// revision that fails, deletion — one Reconcile each, against an in-process
// agent. After each step the stored status says what happened, the events
// report the transitions once, and kstatus agrees with the conditions.
func TestWorkspaceSteps(t *testing.T) {
	const revA, revB = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	ws := &autov1alpha1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", Generation: 1, UID: "ws-uid"},
		Spec: autov1alpha1.WorkspaceSpec{
			Git:    &autov1alpha1.GitSource{URL: "https://git.example/r.git", Ref: revA},
			Stacks: []autov1alpha1.WorkspaceStack{{Name: "dev"}},
		},
	}
	e := newStepEnv(t, ws)
	rt := &fakeRuntime{}
	r := &WorkspaceReconciler{Client: e.c, Recorder: e.events, Runtime: rt, Agents: e.pool, Now: e.clock}
	reconcile := func(step string) time.Duration {
		t.Helper()
		res := e.reconcile(t, r, ws)
		kstatusConforms(t, ws)
		t.Logf("%s: requeue %s, %s", step, res.RequeueAfter, conditionsOf(ws))
		return res.RequeueAfter
	}
	ready, stalled := autov1alpha1.WorkspaceReady, autov1alpha1.WorkspaceStalled

	// Starting: the first reconcile adds the finalizer, issues the token and
	// stores Initializing (not lost to its own finalizer update).
	rt.set(workspace.Status{Message: "waiting for the pod"})
	if after := reconcile("starting"); after != 2*time.Second { // the local runtime: not watched
		t.Fatalf("starting: requeue %s, want 2s", after)
	}
	conditionIs(t, ws, ready, metav1.ConditionFalse, autov1alpha1.WorkspaceReasonInitializing)
	if len(ws.Finalizers) != 1 {
		t.Fatalf("finalizers = %v", ws.Finalizers)
	}
	var token corev1.Secret
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: workspace.TokenSecretName(ws)}, &token); err != nil {
		t.Fatalf("token Secret: %v", err)
	}
	if ev := e.drainEvents(); len(ev) != 0 {
		t.Fatalf("events while starting normally: %q", ev)
	}

	// The kubelet cannot pull the image: failing, retried, not stalled.
	rt.set(workspace.Status{Reason: autov1alpha1.WorkspaceReasonImagePullFailed, Message: "ErrImagePull", RecheckAfter: 3 * time.Second})
	if after := reconcile("pull failing"); after != 3*time.Second {
		t.Fatalf("pull failing: requeue %s, want the runtime's 3s", after)
	}
	conditionIs(t, ws, ready, metav1.ConditionFalse, autov1alpha1.WorkspaceReasonImagePullFailed)
	conditionIs(t, ws, stalled, "", "")
	if ev := e.drainEvents(); len(ev) != 1 || ev[0] != "Warning ImagePullFailed ErrImagePull" {
		t.Fatalf("events = %q", ev)
	}

	// It lasts: stalled.
	rt.set(workspace.Status{Failed: true, Reason: autov1alpha1.WorkspaceReasonImagePullFailed, Message: "ImagePullBackOff"})
	reconcile("stalled")
	conditionIs(t, ws, stalled, metav1.ConditionTrue, autov1alpha1.WorkspaceReasonImagePullFailed)
	if ev := e.drainEvents(); len(ev) != 1 || ev[0] != "Warning ImagePullFailed ImagePullBackOff" {
		t.Fatalf("events = %q", ev)
	}
	reconcile("still stalled")
	if ev := e.drainEvents(); len(ev) != 0 {
		t.Fatalf("a lasting stall reported again: %q", ev)
	}

	// The agent serves revision A: checked, configured, ready.
	rt.set(workspace.Status{Ready: true, Address: "app.ns:50051"})
	e.agent.do(func(a *fakeAgent) { a.info.SourceRef, a.info.Revision = revA, revA })
	if after := reconcile("ready"); after != 30*time.Second {
		t.Fatalf("ready: requeue %s, want 30s", after)
	}
	conditionIs(t, ws, ready, metav1.ConditionTrue, autov1alpha1.WorkspaceReasonRunning)
	conditionIs(t, ws, stalled, "", "")
	if ws.Status.Address != "app.ns:50051" || ws.Status.PulumiVersion != "v3.200.0" {
		t.Fatalf("status = %+v", ws.Status)
	}
	e.agent.do(func(a *fakeAgent) {
		if len(a.selected) != 1 || a.selected[0] != "dev" || len(a.checkouts) != 0 {
			t.Fatalf("agent: selected %v, checkouts %v; want dev selected and no checkout", a.selected, a.checkouts)
		}
		if !a.bearers[string(token.Data[pod.TokenSecretKey])] || len(a.bearers) != 1 {
			t.Fatalf("the agent was called with %d tokens, not (only) the Workspace's", len(a.bearers))
		}
	})
	if ev := e.drainEvents(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Normal Running agent ready at app.ns:50051") {
		t.Fatalf("events = %q", ev)
	}
	reconcile("ready again")
	e.agent.do(func(a *fakeAgent) {
		if len(a.selected) != 1 {
			t.Fatalf("configuration applied again to the same agent: %v", a.selected)
		}
	})

	// A new revision whose checkout the agent refuses for good: the agent
	// is asked, the Workspace stalls for the new generation.
	ws.Spec.Git.Ref, ws.Generation = revB, 2
	if err := e.c.Update(context.Background(), ws); err != nil {
		t.Fatal(err)
	}
	e.agent.do(func(a *fakeAgent) {
		a.checkoutFails = &agentv1.CheckoutStatus{State: agentv1.CheckoutState_CHECKOUT_STATE_FAILED,
			Reason: autov1alpha1.WorkspaceReasonSourceUnavailable, Message: "revision not found", EndTimeUnixNano: e.now.UnixNano()}
	})
	reconcile("checkout asked")
	e.agent.do(func(a *fakeAgent) {
		if len(a.checkouts) != 1 || a.checkouts[0].GetGitRef() != revB || a.checkouts[0].GetGitCredentials() == nil {
			t.Fatalf("checkouts = %v, want one of %s with (empty) credentials", a.checkouts, revB)
		}
	})
	reconcile("checkout failed")
	conditionIs(t, ws, stalled, metav1.ConditionTrue, autov1alpha1.WorkspaceReasonSourceUnavailable)
	if ws.Status.ObservedGeneration != 2 {
		t.Fatalf("stalled on generation 2 with status.observedGeneration %d", ws.Status.ObservedGeneration)
	}

	// The revision appears and checks out; the backend is unreachable:
	// retried with backoff, counted, not stalled yet.
	e.agent.do(func(a *fakeAgent) {
		a.checkoutFails = nil
		a.selectErr["dev"] = status.Error(codes.Unavailable, "backend unreachable")
	})
	e.now = e.now.Add(checkoutRetryClassified)
	reconcile("checking out")
	if after := reconcile("checked out, configuration failing"); after != defaultConfigurePolicy.FirstRetry {
		t.Fatalf("configuration failing: requeue %s, want %s", after, defaultConfigurePolicy.FirstRetry)
	}
	conditionIs(t, ws, ready, metav1.ConditionFalse, autov1alpha1.WorkspaceReasonConfigurationFailed)
	conditionIs(t, ws, stalled, "", "")
	if f := ws.Status.ConfigurationFailure; f == nil || f.Generation != 2 || f.Attempts != 1 {
		t.Fatalf("status.configurationFailure = %+v", f)
	}

	// Fixed: ready on generation 2, the failure record cleared.
	e.agent.do(func(a *fakeAgent) { delete(a.selectErr, "dev") })
	reconcile("configured")
	conditionIs(t, ws, ready, metav1.ConditionTrue, autov1alpha1.WorkspaceReasonRunning)
	if ws.Status.ConfigurationFailure != nil || ws.Status.ObservedGeneration != 2 {
		t.Fatalf("status = %+v", ws.Status)
	}
	e.drainEvents()

	// Deleted: the runtime removes the agent, the finalizer goes, and so
	// does the Workspace.
	if err := e.c.Delete(context.Background(), ws); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background(), ctrlRequest(ws)); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(ws), &autov1alpha1.Workspace{}); !apierrors.IsNotFound(err) || !rt.removed {
		t.Fatalf("after deletion: get %v, runtime removed %v", err, rt.removed)
	}
}
