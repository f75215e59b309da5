package controller

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/workspace"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

// TestUpdateTokenReadOnce: the Update controller reads a Workspace's agent
// token Secret (uncached, from the API server) once, not in each reconcile
// of each Update; it reads it again once the agent refuses the token, and
// forgets it with the Workspace.
func TestUpdateTokenReadOnce(t *testing.T) {
	ctx := context.Background()
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", Generation: 1, UID: "ws-uid"}}
	workspaceConditions.markReady(ws, autov1alpha1.WorkspaceReasonRunning, "agent ready")
	ws.Status.ObservedGeneration, ws.Status.Address = 1, "app.ns:50051"
	tok := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: workspace.TokenSecretName(ws)}, Data: map[string][]byte{pod.TokenSecretKey: []byte("ws-token")}}
	update := func(name string) *autov1alpha1.Update {
		u := stepUpdate()
		u.Name, u.UID = name, types.UID(name+"-uid")
		return u
	}
	u1, u2, u3 := update("app-1"), update("app-2"), update("app-3")
	e := newStepEnv(t, ws, tok, u1, u2, u3)
	secretReads := 0
	c := interceptor.NewClient(e.c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Secret); ok {
				secretReads++
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	fctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	r := &UpdateReconciler{Client: c, Recorder: e.events, Agents: e.pool, Now: e.clock, Tokens: &AgentTokens{},
		followers: &followers{ctx: fctx, active: map[types.UID]bool{}, done: make(chan event.GenericEvent, 16)}}
	bearers := func() map[string]bool {
		var b map[string]bool
		e.agent.do(func(a *fakeAgent) {
			b, a.bearers = a.bearers, map[string]bool{}
		})
		return b
	}

	// One Update started and recorded ended, then another started: one read.
	e.reconcile(t, r, u1)
	if !progressing(u1) {
		t.Fatalf("app-1 not started: %s", conditionsOf(u1))
	}
	e.agent.end(string(u1.UID), &agentv1.Operation{State: agentv1.OperationState_OPERATION_STATE_SUCCEEDED, EndTimeUnixNano: time.Date(2026, 12, 1, 12, 0, 2, 0, time.UTC).UnixNano()})
	e.reconcile(t, r, u1)
	conditionIs(t, u1, autov1alpha1.UpdateConditionTypeComplete, metav1.ConditionTrue, autov1alpha1.UpdateReasonSucceeded)
	e.reconcile(t, r, u2)
	if !progressing(u2) {
		t.Fatalf("app-2 not started: %s", conditionsOf(u2))
	}
	if secretReads != 1 {
		t.Fatalf("token Secret read %d times for two Updates, want once", secretReads)
	}
	if b := bearers(); len(b) != 1 || !b["ws-token"] {
		t.Fatalf("bearers %v, want the Secret's token", b)
	}

	// The Workspace controller recreated the Secret with a new token, which
	// the agent now holds: the remembered one is refused, and the retry
	// reads the Secret again.
	tok.Data[pod.TokenSecretKey] = []byte("ws-token-2")
	if err := e.c.Update(ctx, tok); err != nil {
		t.Fatal(err)
	}
	e.agent.do(func(a *fakeAgent) { a.startErr = status.Error(codes.Unauthenticated, "invalid bearer token") })
	if _, err := r.Reconcile(ctx, ctrlRequest(u3)); status.Code(errorsUnwrapAll(err)) != codes.Unauthenticated {
		t.Fatalf("refused: Reconcile error %v, want Unauthenticated (a transient error: backoff applies)", err)
	}
	e.agent.do(func(a *fakeAgent) { a.startErr = nil })
	e.reconcile(t, r, u3)
	if !progressing(u3) {
		t.Fatalf("app-3 not started: %s", conditionsOf(u3))
	}
	if secretReads != 2 {
		t.Fatalf("token Secret read %d times, want twice (once more after the refusal)", secretReads)
	}
	if b := bearers(); !b["ws-token-2"] {
		t.Fatalf("bearers %v, want the new token", b)
	}

	// The Workspace being deleted takes the memory with it.
	now := metav1.Now()
	gone := ws.DeepCopy()
	gone.DeletionTimestamp = &now
	r.updatesOfWorkspace(ctx, gone)
	if _, ok := r.Tokens.get(ws.UID); ok {
		t.Fatal("the token of a deleted Workspace is still remembered")
	}
}

// errorsUnwrapAll is err's innermost error.
func errorsUnwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}
