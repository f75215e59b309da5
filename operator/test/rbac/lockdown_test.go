package rbac

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/workspace"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/podsecurity"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

type staticToken string

func (s staticToken) Token() (string, error) { return string(s), nil }

// TestLockdownAsServiceAccount runs the operator as its ServiceAccount in
// the multi-tenant settings: agents authenticate the operator's own token
// (--workspace-auth=kube, so no token Secret exists), workspace pods run as
// the default workspace ServiceAccount, and a Stack whose workspaceTemplate
// asks for host networking in a namespace held to "restricted" is Stalled
// with Kubernetes' own reasons, without a StatefulSet — and the generated
// role suffices for all of it (no 403).
func TestLockdownAsServiceAccount(t *testing.T) {
	cp := controlPlane(t)
	ctx := context.Background()
	opNS, ns := cp.Namespace(t), cp.Namespace(t)
	cfg, refused := operatorIdentity(t, opNS)
	startOperator(t, cfg, operator.Options{
		Runtime: operator.RuntimePod, OperatorNamespace: opNS, ArtifactDir: t.TempDir(),
		Pod: pod.Options{AgentImage: "stackflow/operator:test", DefaultPulumiImage: "pulumi/pulumi:3.274.1-nonroot",
			AgentAuth: pod.AgentAuthKube, DefaultServiceAccount: "workspace"},
		AgentTokens: staticToken("unused: no agent runs here"),
		PodSecurity: podsecurity.ModeNamespace,
	}, opNS)
	var nsObj corev1.Namespace
	if err := cp.Client.Get(ctx, types.NamespacedName{Name: ns}, &nsObj); err != nil {
		t.Fatal(err)
	}
	nsObj.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	if err := cp.Client.Update(ctx, &nsObj); err != nil {
		t.Fatal(err)
	}

	stack := func(name string, tmpl *pulumiv1.WorkspaceTemplate) *pulumiv1.Stack {
		s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: pulumiv1.StackSpec{
			Stack: name, GitSource: &pulumiv1.GitSource{ProjectRepo: "https://example.com/acme/app.git",
				Commit: "0123456789abcdef0123456789abcdef01234567"},
			WorkspaceTemplate: tmpl,
		}}
		if err := cp.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	stack("tenant", nil)
	hostNet := stack("host-network", &pulumiv1.WorkspaceTemplate{Spec: &autov1alpha1.WorkspaceSpec{
		PodTemplate: &autov1alpha1.EmbeddedPodTemplateSpec{Spec: &corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{Name: pod.ContainerName}}}},
	}})

	var sts appsv1.StatefulSet
	substrate.Eventually(t, time.Minute, "the tenant's workspace StatefulSet", func() (bool, error) {
		err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: pod.Name("tenant")}, &sts)
		return err == nil, client404(err)
	})
	spec := sts.Spec.Template.Spec
	if spec.ServiceAccountName != "workspace" {
		t.Errorf("workspace pod ServiceAccount = %q, want the lockdown default %q", spec.ServiceAccountName, "workspace")
	}
	c := spec.Containers[0]
	if !slices.Contains(c.Args, "--auth=kube") || !slices.Contains(c.Args, "--kube-workspace="+ns+"/tenant") {
		t.Errorf("agent args %v: want --auth=kube for workspace %s/tenant", c.Args, ns)
	}
	for _, e := range c.Env {
		if e.Name == pod.TokenEnvVar {
			t.Errorf("the workspace pod gets %s under kube auth", pod.TokenEnvVar)
		}
	}
	var tenantWS autov1alpha1.Workspace
	if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "tenant"}, &tenantWS); err != nil {
		t.Fatal(err)
	}
	var tok corev1.Secret
	if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: workspace.TokenSecretName(&tenantWS)}, &tok); !apierrors.IsNotFound(err) {
		t.Errorf("agent token Secret under kube auth: err = %v, want NotFound", err)
	}

	substrate.Eventually(t, time.Minute, "the host-network Stack stalled by Pod Security", func() (bool, error) {
		if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: hostNet.Name}, hostNet); err != nil {
			return false, err
		}
		st := apimeta.FindStatusCondition(hostNet.Status.Conditions, pulumiv1.StalledCondition)
		return st != nil && st.Status == metav1.ConditionTrue, nil
	})
	st := apimeta.FindStatusCondition(hostNet.Status.Conditions, pulumiv1.StalledCondition)
	t.Logf("Stalled %s: %s", st.Reason, st.Message)
	for _, want := range []string{`PodSecurity "restricted:latest" of namespace ` + ns, "host namespaces (hostNetwork=true)", "spec.workspaceTemplate"} {
		if !strings.Contains(st.Message, want) {
			t.Errorf("Stalled message %q lacks %q", st.Message, want)
		}
	}
	if st.Reason != pulumiv1.StalledWorkspaceFailedReason {
		t.Errorf("Stalled reason %q, want %q", st.Reason, pulumiv1.StalledWorkspaceFailedReason)
	}
	var ws autov1alpha1.Workspace
	if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: hostNet.Name}, &ws); err != nil {
		t.Fatal(err)
	}
	if c := apimeta.FindStatusCondition(ws.Status.Conditions, autov1alpha1.WorkspaceStalled); c == nil || c.Reason != autov1alpha1.WorkspaceReasonPodSecurityForbidden {
		t.Errorf("Workspace Stalled condition %+v, want reason %s", c, autov1alpha1.WorkspaceReasonPodSecurityForbidden)
	}
	// The refusal came before any StatefulSet (the Workspace is stalled, so
	// the decision is taken).
	if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: pod.Name(hostNet.Name)}, &sts); !apierrors.IsNotFound(err) {
		t.Errorf("refused workspace's StatefulSet: err = %v, want NotFound", err)
	}
	// Leave nothing for the next test's operator (which serves every
	// namespace, this one included once it is terminating, where creating
	// anything is refused with a 403): delete the Stacks while this operator
	// runs and releases their finalizers.
	for _, name := range []string{"tenant", hostNet.Name} {
		s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if err := cp.Client.Delete(ctx, s); err != nil {
			t.Fatal(err)
		}
		substrate.Eventually(t, time.Minute, "Stack "+name+" deleted", func() (bool, error) {
			err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s)
			return apierrors.IsNotFound(err), client404(err)
		})
	}
	assertNoForbidden(t, refused)
}

// client404 hides NotFound (still waiting) from Eventually.
func client404(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
