package controller

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/workspace"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
)

// TestWorkspaceTokenReadOnce: a Workspace looked at again does not read its
// agent token Secret again (Secrets are read uncached from the API server;
// in a fleet these reads were most of the steady load), and the token is
// read again — the Secret recreated if it is gone — when the runtime
// reports the Workspace failing and when the agent refuses the token. A
// Workspace whose agent is starting is looked at again every 2 s with the
// local runtime and every 30 s where pods are watched.
func TestWorkspaceTokenReadOnce(t *testing.T) {
	ctx := context.Background()
	ws := &autov1alpha1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", Generation: 1, UID: "ws-uid"},
		Spec:       autov1alpha1.WorkspaceSpec{Git: &autov1alpha1.GitSource{URL: "https://git.example/r.git", Ref: "main"}},
	}
	e := newStepEnv(t, ws)
	secretReads := 0
	c := interceptor.NewClient(e.c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Secret); ok {
				secretReads++
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	rt := &fakeRuntime{}
	r := &WorkspaceReconciler{Client: c, Recorder: e.events, Runtime: rt, Agents: e.pool, Now: e.clock, WatchPods: true, Tokens: &AgentTokens{}}
	key := client.ObjectKey{Namespace: "ns", Name: workspace.TokenSecretName(ws)}
	token := func() string {
		t.Helper()
		var s corev1.Secret
		if err := e.c.Get(ctx, key, &s); err != nil {
			t.Fatalf("token Secret: %v", err)
		}
		return string(s.Data[pod.TokenSecretKey])
	}

	rt.set(workspace.Status{Message: "waiting for the pod"})
	if res := e.reconcile(t, r, ws); res.RequeueAfter != 30*time.Second {
		t.Fatalf("starting, pods watched: requeue %s, want 30s", res.RequeueAfter)
	}
	first := token()
	for range 3 {
		e.reconcile(t, r, ws)
	}
	if secretReads != 1 {
		t.Fatalf("token Secret read %d times in four reconciles, want once (the first, which created it)", secretReads)
	}

	// Failing (the pod cannot read the deleted Secret into its environment): read again, and
	// recreated with a new token.
	if err := e.c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}); err != nil {
		t.Fatal(err)
	}
	rt.set(workspace.Status{Reason: autov1alpha1.WorkspaceReasonContainerConfigInvalid, Message: `CreateContainerConfigError: secret "app-agent-token" not found`})
	e.reconcile(t, r, ws)
	e.reconcile(t, r, ws)
	second := token()
	if second == first || secretReads != 2 {
		t.Fatalf("after failing: token recreated %v, Secret reads %d; want a new token after one more read", second != first, secretReads)
	}

	// Serving, then refusing the token: read again on the next reconcile.
	// (Serving: the token is read once, after the failure, and kept.)
	rt.set(workspace.Status{Ready: true, Address: "app.ns:50051"})
	e.reconcile(t, r, ws)
	e.reconcile(t, r, ws)
	if secretReads != 3 {
		t.Fatalf("serving after the failure: %d Secret reads in all, want 3", secretReads)
	}
	e.agent.do(func(a *fakeAgent) { a.infoErr = status.Error(codes.Unauthenticated, "invalid bearer token") })
	reads := secretReads
	e.reconcile(t, r, ws)
	if secretReads != reads {
		t.Fatalf("the token was read again before the agent refused it")
	}
	e.reconcile(t, r, ws)
	if secretReads != reads+1 {
		t.Fatalf("after the agent refused the token: %d Secret reads, want 1", secretReads-reads)
	}

	// The local runtime is not watched: a starting agent is looked at
	// every 2 s.
	r.WatchPods = false
	e.agent.do(func(a *fakeAgent) { a.infoErr = nil })
	rt.set(workspace.Status{Message: "waiting for the agent"})
	if res := e.reconcile(t, r, ws); res.RequeueAfter != 2*time.Second {
		t.Fatalf("starting, local runtime: requeue %s, want 2s", res.RequeueAfter)
	}
}
