package e2e

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/workspace"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
)

// TestPodRuntimeWorkspace runs the Workspace controller with the pod runtime.
// No kubelet runs here, so the pods never start: the test checks the objects
// the controller maintains — the StatefulSet and Service owned by the
// Workspace, the token Secret, the Initializing condition — and that a
// config-only change leaves the StatefulSet alone while an image change rolls
// it.
func TestPodRuntimeWorkspace(t *testing.T) {
	ns := cp.Namespace(t)
	startOperator(t, operator.Options{Runtime: operator.RuntimePod, Pod: pod.Options{
		AgentImage: "stackflow/operator:test", DefaultPulumiImage: "pulumi/pulumi:3.274.1-nonroot",
	}})
	ctx := context.Background()
	ws := newWorkspace(ns, "in-cluster", "https://example.com/acme/app.git", stackConfig("content", "a"))
	if err := cp.Client.Create(ctx, ws); err != nil {
		t.Fatal(err)
	}
	var sts appsv1.StatefulSet
	key := types.NamespacedName{Namespace: ns, Name: pod.Name("in-cluster")}
	eventually(t, time.Minute, "the workspace StatefulSet", func() (bool, error) {
		return cp.Client.Get(ctx, key, &sts) == nil, nil
	})
	if owner := metav1OwnerName(sts.OwnerReferences); owner != "in-cluster" {
		t.Fatalf("StatefulSet owner = %q, want the Workspace", owner)
	}
	var svc corev1.Service
	if err := cp.Client.Get(ctx, key, &svc); err != nil || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatalf("headless service: %v %+v", err, svc.Spec)
	}
	if err := get(t, ws); err != nil {
		t.Fatal(err)
	}
	var tok corev1.Secret
	if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "in-cluster-agent-token-" + string(ws.UID)[:8]}, &tok); err != nil || len(tok.Data["token"]) != 64 {
		t.Fatalf("token secret: %v (%d bytes)", err, len(tok.Data["token"]))
	}
	c := sts.Spec.Template.Spec.Containers[0]
	if c.Image != "pulumi/pulumi:3.274.1-nonroot" || sts.Spec.Template.Spec.InitContainers[0].Image != "stackflow/operator:test" {
		t.Fatalf("images: %s, init %s", c.Image, sts.Spec.Template.Spec.InitContainers[0].Image)
	}
	eventually(t, time.Minute, "Initializing condition", func() (bool, error) {
		if err := get(t, ws); err != nil {
			return false, err
		}
		cond := apimeta.FindStatusCondition(ws.Status.Conditions, autov1alpha1.WorkspaceReady)
		return cond != nil && cond.Status == "False" && cond.Reason == autov1alpha1.WorkspaceReasonInitializing, nil
	})

	// Config only: the StatefulSet is not touched.
	gen := sts.Generation
	mutate(t, ws, func() { ws.Spec.Stacks[0].Config = stackConfig("content", "b") })
	// Once the controller has reconciled the new generation (its Ready
	// condition says so), it has decided about the StatefulSet.
	eventually(t, time.Minute, "the config change reconciled", func() (bool, error) {
		if err := get(t, ws); err != nil {
			return false, err
		}
		cond := apimeta.FindStatusCondition(ws.Status.Conditions, autov1alpha1.WorkspaceReady)
		return cond != nil && cond.ObservedGeneration == ws.Generation, nil
	})
	if err := cp.Client.Get(ctx, key, &sts); err != nil {
		t.Fatal(err)
	}
	if sts.Generation != gen {
		t.Fatalf("a config-only change rolled the workspace pod (generation %d → %d)", gen, sts.Generation)
	}

	// Image: the pod template is replaced.
	mutate(t, ws, func() { ws.Spec.Image = "registry.example.com/pulumi:custom" })
	eventually(t, time.Minute, "the StatefulSet to take the new image", func() (bool, error) {
		if err := cp.Client.Get(ctx, key, &sts); err != nil {
			return false, err
		}
		return sts.Spec.Template.Spec.Containers[0].Image == "registry.example.com/pulumi:custom" && sts.Generation > gen, nil
	})
}

func metav1OwnerName(refs []metav1.OwnerReference) string {
	for _, r := range refs {
		if r.Kind == "Workspace" && r.Controller != nil && *r.Controller {
			return r.Name
		}
	}
	return ""
}

// TestPodRuntimeTokenRotatesWithTheWorkspace: the agent token is never
// reused across Workspaces of one name. Its Secret is named for the
// Workspace's UID: a recreated Workspace gets a new Secret and a new token
// at once, and its pod reads that one, although the old Secret is still
// there (no garbage collector runs here; on a cluster it deletes it).
func TestPodRuntimeTokenRotatesWithTheWorkspace(t *testing.T) {
	ns := cp.Namespace(t)
	startOperator(t, operator.Options{Runtime: operator.RuntimePod, Pod: pod.Options{
		AgentImage: "stackflow/operator:test", DefaultPulumiImage: "pulumi/pulumi:3.274.1-nonroot",
	}})
	ctx := context.Background()
	// tokenOf waits for ws's token Secret and its StatefulSet, and returns
	// the token after checking that the pod reads it.
	tokenOf := func(ws *autov1alpha1.Workspace) string {
		t.Helper()
		var s corev1.Secret
		key := types.NamespacedName{Namespace: ns, Name: workspace.TokenSecretName(ws)}
		var sts appsv1.StatefulSet
		eventually(t, time.Minute, "the token Secret and StatefulSet of the Workspace", func() (bool, error) {
			if err := cp.Client.Get(ctx, key, &s); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: pod.Name(ws.Name)}, &sts)
			if err != nil {
				return false, client.IgnoreNotFound(err)
			}
			owner := metav1.GetControllerOf(&sts)
			return owner != nil && owner.UID == ws.UID, nil
		})
		if owner := metav1.GetControllerOf(&s); owner == nil || owner.UID != ws.UID {
			t.Fatalf("token Secret %s is not controlled by the Workspace: %+v", key.Name, owner)
		}
		var ref string
		for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
			if e.Name == pod.TokenEnvVar && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				ref = e.ValueFrom.SecretKeyRef.Name
			}
		}
		if ref != key.Name {
			t.Fatalf("the workspace pod reads its token from %q, want %q", ref, key.Name)
		}
		return string(s.Data[pod.TokenSecretKey])
	}
	ws := newWorkspace(ns, "rot", "https://example.com/acme/app.git", stackConfig("content", "a"))
	if err := cp.Client.Create(ctx, ws); err != nil {
		t.Fatal(err)
	}
	first := tokenOf(ws)
	if len(first) != 64 {
		t.Fatalf("token of %d characters, want 64 (256 bits, hex)", len(first))
	}

	// Recreated: the old Workspace goes (its StatefulSet and token Secret
	// stay, as no garbage collector runs; the test deletes the StatefulSet,
	// whose name is not per UID, as the collector would).
	if err := cp.Client.Delete(ctx, ws); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the Workspace to be gone", func() (bool, error) {
		err := cp.Client.Get(ctx, client.ObjectKeyFromObject(ws), &autov1alpha1.Workspace{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err := cp.Client.Delete(ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name("rot")}}); err != nil {
		t.Fatal(err)
	}
	again := newWorkspace(ns, "rot", "https://example.com/acme/app.git", stackConfig("content", "a"))
	if err := cp.Client.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	if second := tokenOf(again); second == first || len(second) != 64 {
		t.Fatalf("the recreated Workspace's token is the old one (or malformed: %d characters)", len(second))
	}
	if workspace.TokenSecretName(again) == workspace.TokenSecretName(ws) {
		t.Fatal("both Workspaces use one token Secret name")
	}
}

// TestPodRuntimeListsEnvFromSecretVariables: the variables a workspace pod
// gets from envFrom Secrets are known from the Secrets' keys only; the runtime
// reads them and lists the variables for the agent to redact (the kubelet
// that would set them does not run here: the agent's side is
// agent.SecretEnvNamesEnv's tests).
func TestPodRuntimeListsEnvFromSecretVariables(t *testing.T) {
	ns := cp.Namespace(t)
	startOperator(t, operator.Options{Runtime: operator.RuntimePod, Pod: pod.Options{
		AgentImage: "stackflow/operator:test", DefaultPulumiImage: "pulumi/pulumi:3.274.1-nonroot",
	}})
	ctx := context.Background()
	if err := cp.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cloud"},
		StringData: map[string]string{"KEY": "k", "SECRET": "s"}}); err != nil {
		t.Fatal(err)
	}
	ws := newWorkspace(ns, "envfrom", "https://example.com/acme/app.git", stackConfig("content", "a"))
	ws.Spec.EnvFrom = []corev1.EnvFromSource{
		{Prefix: "CLOUD_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cloud"}}},
		{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Optional: new(true)}},
	}
	if err := cp.Client.Create(ctx, ws); err != nil {
		t.Fatal(err)
	}
	var sts appsv1.StatefulSet
	eventually(t, time.Minute, "the workspace StatefulSet", func() (bool, error) {
		err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: pod.Name("envfrom")}, &sts)
		return err == nil, client.IgnoreNotFound(err)
	})
	var listed string
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		if e.Name == pod.SecretEnvNamesVar {
			listed = e.Value
		}
	}
	if listed != "CLOUD_KEY,CLOUD_SECRET" {
		t.Fatalf("%s = %q, want CLOUD_KEY,CLOUD_SECRET", pod.SecretEnvNamesVar, listed)
	}
}
