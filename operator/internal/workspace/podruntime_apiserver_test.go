package workspace_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/workspace"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestPodRuntimeWritesServiceOnlyWhenItDiffers: against a real API server
// (which defaults the Service's fields), Ensure writes the Service when it
// is created and when what the operator sets on it changes, and never for a
// Workspace looked at again with nothing changed — a fleet's Workspaces are
// looked at every 30 s, and an unconditional update was most of a steady
// operator's API requests (BenchmarkControllerAtScale's per-verb counts).
func TestPodRuntimeWritesServiceOnlyWhenItDiffers(t *testing.T) {
	ctx := context.Background()
	cp := substrate.StartControlPlaneT(t)
	ns := cp.Namespace(t)
	ws := &autov1alpha1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dev"},
		Spec:       autov1alpha1.WorkspaceSpec{Git: &autov1alpha1.GitSource{URL: "https://example.com/app.git", Ref: "main"}},
	}
	if err := cp.Client.Create(ctx, ws); err != nil {
		t.Fatal(err)
	}
	// Counted at the client: the API server makes an update that changes
	// nothing a no-op (same resourceVersion), but it is still a request.
	var serviceWrites int
	ww, err := client.NewWithWatch(cp.Config, client.Options{Scheme: cp.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	c := interceptor.NewClient(ww, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, ok := obj.(*corev1.Service); ok {
				serviceWrites++
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	r := &workspace.PodRuntime{Client: c, Reader: cp.Client, Scheme: cp.Client.Scheme(),
		Options: pod.Options{AgentImage: "agent:test", DefaultPulumiImage: "pulumi:test", AgentAuth: pod.AgentAuthKube}}
	svcVersion := func() string {
		t.Helper()
		var svc corev1.Service
		if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: pod.Name("dev")}, &svc); err != nil {
			t.Fatal(err)
		}
		return svc.ResourceVersion
	}
	ensure := func() {
		t.Helper()
		if _, err := r.Ensure(ctx, ws, ""); err != nil {
			t.Fatal(err)
		}
	}
	ensure()
	created := svcVersion()
	for range 3 {
		ensure()
	}
	if serviceWrites != 0 {
		t.Fatalf("the Service was updated %d times with nothing changed", serviceWrites)
	}
	r.Options.Port = 50052
	ensure()
	if v := svcVersion(); serviceWrites != 1 || v == created {
		t.Fatalf("for a new agent port: %d Service updates, resourceVersion %s → %s; want one that changes it", serviceWrites, created, v)
	}
}
