//go:build cluster

package clustere2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/provider"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// recordProgram writes a test provider record named by config and outputs
// its content.
const recordProgram = `name: records
runtime: yaml
config:
  recordName:
    type: string
  content:
    type: string
resources:
  rec:
    type: stackflowtest:index:Record
    properties:
      name: ${recordName}
      content: ${content}
outputs:
  content: ${rec.content}
`

// stateVolume is a directory of the host, given to a namespace as the
// PersistentVolumeClaim "state" (a hostPath PersistentVolume bound to it: the
// restricted level forbids hostPath volumes in pods, not claims). It holds the
// workspace's file backend and the test provider's records, so that the test
// reads them and they survive the workspace pod.
func stateVolume(t *testing.T, ns string) string {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Runs before the TempDir's removal: containerd recreates a missing
	// host path when it restarts a container, so the workspace pods must be
	// gone first (their StatefulSets too, or they come back).
	t.Cleanup(func() { removeWorkloads(t, ns) })
	// The restricted security profile runs the workspace as 1000:1000
	// (operator/internal/workspace/pod/template.go), whatever the image's user.
	if err := os.Chown(dir, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "state-" + ns},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: dir, Type: ptr.To(corev1.HostPathDirectory)}},
		},
	}
	if _, err := testCluster.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = testCluster.Client.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "state", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			StorageClassName: ptr.To(""),
			VolumeName:       pv.Name,
		},
	}
	if _, err := testCluster.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// servedRepo is a git repository "program" served over HTTP on the
// cluster's gateway address, which workspace pods reach.
func servedRepo(t *testing.T) (*gitrepo.Repo, *gitrepo.HTTPServer) {
	t.Helper()
	root := t.TempDir()
	repo := gitrepo.NewIn(t, root, "program")
	srv := gitrepo.NewHTTPServerAt(t, root, testCluster.GatewayIP)
	srv.Start(t)
	return repo, srv
}

// removeWorkloads deletes the namespace's StatefulSets and pods (grace
// period 0) and waits up to a minute for the pods to be gone.
func removeWorkloads(t *testing.T, ns string) {
	ctx := context.Background()
	zero := int64(0)
	_ = testCluster.Client.AppsV1().StatefulSets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	_ = testCluster.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := testCluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		t.Logf("Pods of %s still present a minute after their deletion", ns)
	}
}

func literal(v string) pulumiv1.ResourceRef {
	return pulumiv1.ResourceRef{SelectorType: pulumiv1.ResourceSelectorLiteral, ResourceSelector: pulumiv1.ResourceSelector{LiteralRef: &pulumiv1.LiteralRef{Value: v}}}
}

// installTestProvider is an init container installing the test provider from
// the test workspace image into the workspace's PULUMI_HOME (on the share
// volume): the agent's `pulumi install` looks only there, not on PATH, and
// would try to download it. A user's image with its own provider needs the
// same.
func installTestProvider() corev1.Container {
	return corev1.Container{
		Name: "install-test-provider", Image: testImages.Workspace, ImagePullPolicy: corev1.PullNever,
		Command: []string{"/pulumi/bin/pulumi", "plugin", "install", "resource", provider.Name, provider.Version,
			"--file", "/pulumi/bin/pulumi-resource-" + provider.Name},
		Env: []corev1.EnvVar{
			{Name: "PULUMI_HOME", Value: pod.ShareDir + "/.pulumi"}, {Name: "HOME", Value: pod.ShareDir + "/home"},
			{Name: "PULUMI_SKIP_UPDATE_CHECK", Value: "true"},
		},
		VolumeMounts:    []corev1.VolumeMount{{Name: "share", MountPath: pod.ShareDir}},
		SecurityContext: restrictedSecurityContext(),
	}
}

// podRuntimeOptions run the operator in this process with the pod runtime,
// the test workspace image as the default Pulumi image and as the agent
// image, reaching agents at their pod IPs (there is no cluster DNS).
func podRuntimeOptions(t *testing.T) operator.Options {
	return operator.Options{
		Runtime: operator.RuntimePod,
		Pod: pod.Options{
			AgentImage: testImages.Workspace, DefaultPulumiImage: testImages.Workspace, AddressByPodIP: true,
		},
		WorkspaceWorkers: 2, UpdateWorkers: 2, StackWorkers: 2,
		StackResyncOverride: time.Second,
		ArtifactDir:         t.TempDir(),
	}
}

// waitStack waits until cond holds for s, reporting its conditions and the
// workspace pod's state on timeout.
func waitStack(t *testing.T, s *pulumiv1.Stack, timeout time.Duration, what string, cond func(*pulumiv1.Stack) bool) {
	t.Helper()
	substrate.Eventually(t, timeout, s.Name+" "+what, func() (bool, error) {
		if err := testClient.Get(context.Background(), client.ObjectKeyFromObject(s), s); err != nil {
			return false, err
		}
		if cond(s) {
			return true, nil
		}
		b, _ := json.Marshal(s.Status.Conditions)
		var p corev1.Pod
		_ = testClient.Get(context.Background(), client.ObjectKey{Namespace: s.Namespace, Name: pod.PodName(s.Name)}, &p)
		ps, _ := json.Marshal(p.Status.ContainerStatuses)
		return false, fmt.Errorf("conditions %s; workspace pod %s %s", b, p.Status.Phase, ps)
	})
}

func readyAt(rev string) func(*pulumiv1.Stack) bool {
	return func(s *pulumiv1.Stack) bool {
		c := apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.ReadyCondition)
		return c != nil && c.Status == metav1.ConditionTrue && s.Status.LastUpdate != nil &&
			s.Status.LastUpdate.LastSuccessfulCommit == rev && s.Status.ObservedGeneration == s.Generation
	}
}

// history reads the file backend's update history of a stack: the git.head
// of each succeeded update, oldest first.
func history(t *testing.T, backend, stack string) []string {
	t.Helper()
	var heads []string
	for _, u := range updates(t, backend, stack) {
		if u.Result == "succeeded" {
			heads = append(heads, u.Head)
		}
	}
	return heads
}

// backendUpdate is an update in the file backend's history.
type backendUpdate struct{ Head, Result string }

// updates are the stack's updates in the file backend's history, oldest
// first, with their results (an update interrupted by a kill that pulumi
// could still record is there as failed).
func updates(t *testing.T, backend, stack string) []backendUpdate {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(backend, ".pulumi", "history", "*", stack, "*.history.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out []backendUpdate
	for _, f := range files { // named <stack>-<unix nanos>: sorted by time
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var h struct {
			Kind        string            `json:"kind"`
			Result      string            `json:"result"`
			Environment map[string]string `json:"environment"`
		}
		if err := json.Unmarshal(b, &h); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if h.Kind == "update" {
			out = append(out, backendUpdate{Head: h.Environment["git.head"], Result: h.Result})
		}
	}
	return out
}

// workspaceStack is a Stack of recordProgram from src whose workspace runs
// the test workspace image, with its file backend and the test provider's
// records on the namespace's "state" claim (stateVolume).
func workspaceStack(ns, name string, src *pulumiv1.GitSource) *pulumiv1.Stack {
	return &pulumiv1.Stack{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: pulumiv1.StackSpec{
			Stack:     name,
			GitSource: src,
			Backend:   "file:///state",
			EnvRefs: map[string]pulumiv1.ResourceRef{
				"PULUMI_CONFIG_PASSPHRASE":                    literal(substrate.TestPassphrase),
				"PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": literal("true"),
				"STACKFLOW_TEST_PROVIDER_DIR":                 literal("/state/records"),
			},
			Config: map[string]apiextensionsv1.JSON{"recordName": jsonString(name), "content": jsonString("one")},
			WorkspaceTemplate: &pulumiv1.WorkspaceTemplate{Spec: &autov1alpha1.WorkspaceSpec{
				Image: testImages.Workspace, ImagePullPolicy: corev1.PullNever,
				PodTemplate: &autov1alpha1.EmbeddedPodTemplateSpec{Spec: &corev1.PodSpec{
					Volumes: []corev1.Volume{{Name: "state", VolumeSource: corev1.VolumeSource{
						PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "state"}}}},
					InitContainers: []corev1.Container{installTestProvider()},
					Containers:     []corev1.Container{{Name: pod.ContainerName, VolumeMounts: []corev1.VolumeMount{{Name: "state", MountPath: "/state"}}}},
				}},
			}},
		},
	}
}

// TestStackDeploysThroughWorkspacePod is issue 15's first end-to-end test: a
// Stack tracking a branch of a git server on the host deploys through a real
// workspace pod running under the restricted level (the test workspace image
// as spec.image); its outputs reach the Stack and the outputs Secret exists;
// a pushed commit is deployed.
func TestStackDeploysThroughWorkspacePod(t *testing.T) {
	ctx := context.Background()
	ns := restrictedNamespace(t)
	state := stateVolume(t, ns)

	repo, srv := servedRepo(t)
	sha1 := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": recordProgram})
	operatortest.StartOperator(t, testCluster.Config, podRuntimeOptions(t))

	start := time.Now()
	s := workspaceStack(ns, "dev", &pulumiv1.GitSource{ProjectRepo: repo.HTTPURL(srv), Branch: "main"})
	if err := testClient.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	waitStack(t, s, 3*time.Minute, "ready at the first commit", readyAt(sha1))
	t.Logf("Stack Ready at the first commit %s after creation", time.Since(start).Round(time.Millisecond))
	if got := string(s.Status.Outputs["content"].Raw); got != `"one"` {
		t.Errorf("output content = %s", got)
	}
	if b, err := os.ReadFile(filepath.Join(state, "records", "dev")); err != nil || string(b) != "one" {
		t.Errorf("record written in the pod = %q (%v)", b, err)
	}
	var secrets corev1.SecretList
	if err := testClient.List(ctx, &secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var outputs []string
	for _, sec := range secrets.Items {
		if strings.HasSuffix(sec.Name, "-stack-outputs") {
			outputs = append(outputs, sec.Name)
		}
	}
	if len(outputs) != 1 {
		t.Errorf("outputs Secrets %v, want one", outputs)
	}
	var p1 corev1.Pod
	if err := testClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: pod.PodName(s.Name)}, &p1); err != nil {
		t.Fatal(err)
	}
	if p1.Spec.SecurityContext == nil || p1.Spec.SecurityContext.RunAsNonRoot == nil || !*p1.Spec.SecurityContext.RunAsNonRoot {
		t.Errorf("workspace pod security context %+v", p1.Spec.SecurityContext)
	}

	start = time.Now()
	sha2 := repo.Commit(t, "v2", map[string]string{"Pulumi.yaml": strings.Replace(recordProgram, "content: ${content}", "content: pushed-${content}", 1)})
	waitStack(t, s, 5*time.Minute, "ready at the pushed commit", readyAt(sha2))
	t.Logf("Stack Ready at the pushed commit %s after the push", time.Since(start).Round(time.Millisecond))
	if b, _ := os.ReadFile(filepath.Join(state, "records", "dev")); string(b) != "pushed-one" {
		t.Errorf("record after the push = %q", b)
	}
	if h := history(t, state, "dev"); len(h) != 2 || h[0] != sha1 || h[1] != sha2 {
		t.Errorf("backend history git.head %v, want [%s %s]", h, sha1, sha2)
	}
	var p2 corev1.Pod
	if err := testClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: pod.PodName(s.Name)}, &p2); err != nil {
		t.Fatal(err)
	}
	// The running agent checked the new commit out in place: the same pod,
	// its workspace container never restarted.
	if p2.UID != p1.UID {
		t.Errorf("workspace pod recreated for a new commit: %s, was %s", p2.UID, p1.UID)
	}
	if restarts := containerRestarts(&p2); restarts != 0 {
		t.Errorf("workspace container restarted %d time(s) for a new commit", restarts)
	}
	var ws autov1alpha1.Workspace
	if err := testClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: s.Name}, &ws); err != nil {
		t.Fatal(err)
	}
	if ready := apimeta.FindStatusCondition(ws.Status.Conditions, autov1alpha1.WorkspaceReady); ready == nil || !strings.Contains(ready.Message, "revision "+sha2) {
		t.Errorf("Workspace Ready = %v, want the agent at revision %s", ready, sha2)
	}
}

// containerRestarts is the workspace container's restart count.
func containerRestarts(p *corev1.Pod) int32 {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == pod.ContainerName {
			return cs.RestartCount
		}
	}
	return 0
}

func jsonString(s string) apiextensionsv1.JSON {
	b, _ := json.Marshal(s)
	return apiextensionsv1.JSON{Raw: b}
}
