package workspace

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
)

// TestPodRuntimeAddressByPodIP: with AddressByPodIP, a ready workspace is
// reached at its pod's IP, and only once the pod of the current template is
// ready; without it, at the headless Service's DNS name.
func TestPodRuntimeAddressByPodIP(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := autov1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ws := &autov1alpha1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "dev", UID: "uid-1"},
		Spec:       autov1alpha1.WorkspaceSpec{Git: &autov1alpha1.GitSource{URL: "https://example.com/app.git", Ref: "main"}},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(ws).Build()
	r := &PodRuntime{Client: c, Scheme: scheme, Options: pod.Options{AgentImage: "agent:test", DefaultPulumiImage: "pulumi:test", AddressByPodIP: true}}
	if st, err := r.Ensure(ctx, ws, ""); err != nil || st.Ready {
		t.Fatalf("first Ensure = %+v, %v; want created, not ready", st, err)
	}
	var sts appsv1.StatefulSet
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: pod.Name("dev")}, &sts); err != nil {
		t.Fatal(err)
	}
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, ReadyReplicas: 1, UpdatedReplicas: 1}
	if err := c.Status().Update(ctx, &sts); err != nil {
		t.Fatal(err)
	}
	if st, err := r.Ensure(ctx, ws, ""); err != nil || st.Ready {
		t.Fatalf("Ensure without a pod = %+v, %v; want not ready", st, err)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: pod.PodName("dev"), Annotations: map[string]string{
			pod.AnnotationPodSpecHash: sts.Spec.Template.Annotations[pod.AnnotationPodSpecHash]}},
		Status: corev1.PodStatus{PodIP: "10.244.0.7", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	st, err := r.Ensure(ctx, ws, "")
	if err != nil || !st.Ready || st.Address != "10.244.0.7:50051" {
		t.Fatalf("Ensure with a ready pod = %+v, %v; want ready at 10.244.0.7:50051", st, err)
	}
	r.Options.AddressByPodIP = false
	if st, err := r.Ensure(ctx, ws, ""); err != nil || st.Address != pod.Address(ws, 0) {
		t.Fatalf("Ensure by DNS name = %+v, %v; want %s", st, err, pod.Address(ws, 0))
	}
}
