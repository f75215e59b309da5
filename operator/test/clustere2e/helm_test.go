//go:build cluster

package clustere2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

var (
	helmOnce sync.Once
	helmBin  string
	helmErr  error
)

// helmTool builds hack/tools/helm (helm-render, the Helm SDK in a module of
// its own) once per test binary.
func helmTool(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		start := time.Now()
		dir, err := os.MkdirTemp("", "helm-render-")
		if err != nil {
			helmErr = err
			return
		}
		helmBin = filepath.Join(dir, "helm-render")
		build := exec.Command("go", "build", "-o", helmBin, ".")
		build.Dir = filepath.Join(substrate.RepoRoot(), "hack", "tools", "helm")
		if out, err := build.CombinedOutput(); err != nil {
			helmErr = fmt.Errorf("build hack/tools/helm: %w\n%s", err, out)
			return
		}
		t.Logf("helm-render built in %s", time.Since(start).Round(time.Millisecond))
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmBin
}

// helm runs helm-render with args against the test cluster.
func helm(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(helmTool(t), append(args, "--kubeconfig", testCluster.Kubeconfig)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm-render %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	t.Logf("helm-render %s: %s", args[0], strings.TrimSpace(out.String()))
}

// installChart installs operator/charts/stackflow as release "stackflow"
// into a new namespace, serving the namespace watched, with values on top of
// the test cluster's: the imported operator image (never pulled), one
// replica, agents reached at their pod IPs (no cluster DNS), the analysis
// service off (its image is not built). It returns the release namespace;
// the release is uninstalled at the test's end.
func installChart(t *testing.T, watched string, values map[string]any) string {
	t.Helper()
	ctx := context.Background()
	ns, err := testCluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "stackflow-system-",
		Labels:       map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	repo, tag, ok := strings.Cut(testImages.Operator, ":")
	if !ok {
		t.Fatalf("operator image %q has no tag", testImages.Operator)
	}
	all := map[string]any{
		"image":           map[string]any{"repository": repo, "tag": tag, "pullPolicy": "Never"},
		"watchNamespaces": []string{watched},
		"operator": map[string]any{
			"replicas":  1,
			"extraArgs": []string{"--workspace-address-pod-ip"},
		},
		"analysis": map[string]any{"enabled": false},
	}
	for k, v := range values {
		if m, ok := v.(map[string]any); ok {
			if base, ok := all[k].(map[string]any); ok {
				for kk, vv := range m {
					base[kk] = vv
				}
				continue
			}
		}
		all[k] = v
	}
	b, err := yaml.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("Chart values:\n%s", b)
	chart := filepath.Join(substrate.RepoRoot(), "operator", "charts", "stackflow")
	start := time.Now()
	helm(t, "--install", "--chart", chart, "--release", "stackflow", "--namespace", ns.Name, "--values", f)
	t.Logf("Chart installed in %s", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			logPods(t, ns.Name)
		}
		helm(t, "--uninstall", "--release", "stackflow", "--namespace", ns.Name)
		_ = testCluster.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// waitOperatorPod waits until the release's operator pod is Running and
// Ready as the kubelet reports it, and returns it.
func waitOperatorPod(t *testing.T, ns string) *corev1.Pod {
	t.Helper()
	var ready *corev1.Pod
	substrate.Eventually(t, 2*time.Minute, "the operator pod Running and Ready", func() (bool, error) {
		pods, err := testCluster.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=stackflow-operator"})
		if err != nil {
			return false, err
		}
		if len(pods.Items) != 1 {
			return false, fmt.Errorf("%d operator pods", len(pods.Items))
		}
		p := &pods.Items[0]
		for _, c := range p.Status.ContainerStatuses {
			if p.Status.Phase == corev1.PodRunning && c.Name == "operator" && c.Ready && c.State.Running != nil {
				ready = p
				return true, nil
			}
		}
		cs, _ := json.Marshal(p.Status.ContainerStatuses)
		return false, fmt.Errorf("pod %s %s: %s", p.Name, p.Status.Phase, cs)
	})
	return ready
}

// bindAuthDelegator binds the ServiceAccount to system:auth-delegator, which
// an agent under --auth=kube needs for its TokenReviews and
// SubjectAccessReviews (SECURITY.md).
func bindAuthDelegator(t *testing.T, ns, sa string) {
	t.Helper()
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "stackflow-workspace-" + ns + "-" + sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}},
	}
	if _, err := testCluster.Client.RbacV1().ClusterRoleBindings().Create(context.Background(), crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = testCluster.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})
}

// deleteStackAtEnd deletes s at the test's end while the operator still runs
// (cleanups run last-registered first: call it after installChart), so that
// its finalizer does not hold the namespace.
func deleteStackAtEnd(t *testing.T, s *pulumiv1.Stack) {
	t.Cleanup(func() {
		ctx := context.Background()
		_ = testClient.Delete(ctx, s)
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			return apierrors.IsNotFound(testClient.Get(ctx, client.ObjectKeyFromObject(s), &pulumiv1.Stack{})), nil
		})
		if err != nil {
			t.Logf("Stack %s/%s still present a minute after its deletion", s.Namespace, s.Name)
		}
	})
}

// statusManagers are the field managers of obj's status subresource writes.
func statusManagers(obj metav1.Object) []string {
	var out []string
	for _, f := range obj.GetManagedFields() {
		if f.Subresource == "status" {
			out = append(out, f.Manager)
		}
	}
	return out
}

// TestOperatorFromHelmChart is issue 15's sixth end-to-end test: the
// operator installed from the Helm chart (Helm's install action) runs as a
// Deployment of the imported operator image, reaches the API server through
// the kubernetes Service (kube-proxy) with its in-cluster configuration,
// and reconciles a Stack to Ready through a workspace pod. The chart's
// operator.workspaceAuth is kube: the agent checks the operator's projected
// ServiceAccount token with a TokenReview and a SubjectAccessReview (issue
// 14), on a real kubelet.
func TestOperatorFromHelmChart(t *testing.T) {
	ctx := context.Background()
	ns := restrictedNamespace(t)
	state := stateVolume(t, ns)
	bindAuthDelegator(t, ns, "default")

	repo, srv := servedRepo(t)
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": recordProgram})

	release := installChart(t, ns, map[string]any{"operator": map[string]any{"workspaceAuth": "kube"}})
	start := time.Now()
	op := waitOperatorPod(t, release)
	t.Logf("Operator pod %s Running and Ready %s after the install", op.Name, time.Since(start).Round(time.Millisecond))
	if got := op.Spec.Containers[0].Image; got != testImages.Operator {
		t.Errorf("operator image %q, want %q", got, testImages.Operator)
	}
	// The pod leads: the Lease names it, renewed through the ClusterIP.
	substrate.Eventually(t, time.Minute, "the operator pod holding the leader Lease", func() (bool, error) {
		var l coordinationv1.Lease
		if err := testClient.Get(ctx, clientKey(release, operator.LeaderElectionID), &l); err != nil {
			return false, err
		}
		return ptr.Deref(l.Spec.HolderIdentity, "") == op.Name, fmt.Errorf("holder %q", ptr.Deref(l.Spec.HolderIdentity, ""))
	})

	start = time.Now()
	s := workspaceStack(ns, "helm", &pulumiv1.GitSource{ProjectRepo: repo.HTTPURL(srv), Branch: "main"})
	if err := testClient.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	deleteStackAtEnd(t, s)
	waitStack(t, s, 4*time.Minute, "ready at the commit", readyAt(sha))
	t.Logf("Stack Ready at %s %s after creation", sha, time.Since(start).Round(time.Millisecond))
	if got := string(s.Status.Outputs["content"].Raw); got != `"one"` {
		t.Errorf("output content = %s", got)
	}
	if b, err := os.ReadFile(filepath.Join(state, "records", "helm")); err != nil || string(b) != "one" {
		t.Errorf("record written in the pod = %q (%v)", b, err)
	}
	var secrets corev1.SecretList
	if err := testClient.List(ctx, &secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var outputs, tokens []string
	for _, sec := range secrets.Items {
		switch {
		case strings.HasSuffix(sec.Name, "-stack-outputs"):
			outputs = append(outputs, sec.Name)
		case strings.Contains(sec.Name, "-agent-token-"):
			tokens = append(tokens, sec.Name)
		}
	}
	if len(outputs) != 1 {
		t.Errorf("outputs Secrets %v, want one", outputs)
	}
	// Kube auth: no per-workspace token Secret; the agent runs --auth=kube.
	if len(tokens) != 0 {
		t.Errorf("agent token Secrets %v under workspaceAuth kube, want none", tokens)
	}
	var wp corev1.Pod
	if err := testClient.Get(ctx, clientKey(ns, pod.PodName(s.Name)), &wp); err != nil {
		t.Fatal(err)
	}
	for _, c := range wp.Spec.Containers {
		if c.Name == pod.ContainerName && !strings.Contains(strings.Join(c.Args, " "), "--auth=kube") {
			t.Errorf("agent args %v, want --auth=kube", c.Args)
		}
	}
	// Only the operator pod wrote the status of the Stack, its Workspace and
	// its Updates (its field manager is the operator binary's name; an
	// operator in this test process would be clustere2e.test).
	var ws autov1alpha1.Workspace
	if err := testClient.Get(ctx, clientKey(ns, s.Name), &ws); err != nil {
		t.Fatal(err)
	}
	var updates autov1alpha1.UpdateList
	if err := testClient.List(ctx, &updates, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	objs := []client.Object{s, &ws}
	for i := range updates.Items {
		objs = append(objs, &updates.Items[i])
	}
	for _, o := range objs {
		m := statusManagers(o)
		if len(m) == 0 || slices.ContainsFunc(m, func(x string) bool { return x != "operator" }) {
			t.Errorf("%T %s: status written by %v, want only the operator pod (operator)", o, o.GetName(), m)
		}
	}
}
