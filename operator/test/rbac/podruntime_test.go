package rbac

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/workspace"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestPodRuntimeAsServiceAccount runs the operator with the pod runtime as
// its ServiceAccount with only the generated roles. No kubelet runs, so the
// workspace pod never starts: the test checks that the operator creates the
// Workspace, its token Secret, Service and StatefulSet, rolls the StatefulSet
// on a pod-shaping change, and removes the Workspace when the Stack is
// deleted, without one 403.
func TestPodRuntimeAsServiceAccount(t *testing.T) {
	cp := controlPlane(t)
	ctx := context.Background()
	opNS, ns := cp.Namespace(t), cp.Namespace(t)
	cfg, refused := operatorIdentity(t, opNS)
	startOperator(t, cfg, operator.Options{
		Runtime: operator.RuntimePod, OperatorNamespace: opNS, ArtifactDir: t.TempDir(),
		Pod: pod.Options{AgentImage: "stackflow/operator:test", DefaultPulumiImage: "pulumi/pulumi:3.274.1-nonroot"},
	}, opNS)

	if err := cp.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		StringData: map[string]string{"password": "pw"}}); err != nil {
		t.Fatal(err)
	}
	literal := func(v string) map[string]pulumiv1.ResourceRef {
		return map[string]pulumiv1.ResourceRef{"MODE": {SelectorType: pulumiv1.ResourceSelectorLiteral,
			ResourceSelector: pulumiv1.ResourceSelector{LiteralRef: &pulumiv1.LiteralRef{Value: v}}}}
	}
	s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "in-cluster"}, Spec: pulumiv1.StackSpec{
		Stack: "in-cluster", GitSource: &pulumiv1.GitSource{ProjectRepo: "https://example.com/acme/app.git",
			Commit: "0123456789abcdef0123456789abcdef01234567"},
		Config:  stackConfig("content", "a"),
		EnvRefs: literal("first"),
		SecretRefs: map[string]pulumiv1.ResourceRef{"password": {SelectorType: pulumiv1.ResourceSelectorSecret,
			ResourceSelector: pulumiv1.ResourceSelector{SecretRef: &pulumiv1.SecretSelector{Name: "db", Key: "password"}}}},
	}}
	if err := cp.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}

	var ws autov1alpha1.Workspace
	substrate.Eventually(t, time.Minute, "the Stack's Workspace", func() (bool, error) {
		var list autov1alpha1.WorkspaceList
		if err := cp.Client.List(ctx, &list, client.InNamespace(ns)); err != nil || len(list.Items) != 1 {
			return false, err
		}
		ws = list.Items[0]
		return true, nil
	})
	key := types.NamespacedName{Namespace: ns, Name: pod.Name(ws.Name)}
	var sts appsv1.StatefulSet
	substrate.Eventually(t, time.Minute, "the workspace StatefulSet", func() (bool, error) {
		err := cp.Client.Get(ctx, key, &sts)
		return err == nil, err
	})
	var svc corev1.Service
	if err := cp.Client.Get(ctx, key, &svc); err != nil {
		t.Fatalf("workspace service: %v", err)
	}
	var tok corev1.Secret
	if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: workspace.TokenSecretName(&ws)}, &tok); err != nil || len(tok.Data["token"]) == 0 {
		t.Fatalf("agent token secret: %v", err)
	}

	// An env change reshapes the pod: the Stack updates the Workspace, the
	// runtime the StatefulSet.
	gen := sts.Generation
	mutate(t, cp.Client, s, func() { s.Spec.EnvRefs = literal("second") })
	substrate.Eventually(t, time.Minute, "the StatefulSet rolled", func() (bool, error) {
		err := cp.Client.Get(ctx, key, &sts)
		return err == nil && sts.Generation > gen, err
	})

	// Deleted (no destroyOnFinalize): the operator deletes the Workspace and
	// releases both finalizers; the owned objects are the garbage
	// collector's (which envtest does not run).
	if err := cp.Client.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{s, &ws} {
		substrate.Eventually(t, time.Minute, o.GetName()+" deleted", func() (bool, error) {
			err := cp.Client.Get(ctx, client.ObjectKeyFromObject(o), o)
			return apierrors.IsNotFound(err), err
		})
	}
	assertNoForbidden(t, refused)
}
