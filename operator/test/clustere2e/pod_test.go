//go:build cluster

package clustere2e

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// restrictedNamespace creates a namespace enforcing the restricted Pod
// Security level, deleted at the test's end.
func restrictedNamespace(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	ns, err := testCluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "restricted-",
		Labels:       map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logPods(t, ns.Name)
		}
		_ = testCluster.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// logPods logs the last lines of every container of the namespace's pods
// (read through the kubelet), for a failed test.
func logPods(t *testing.T, ns string) {
	ctx := context.Background()
	pods, err := testCluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("Listing pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			b, err := testCluster.Client.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: ptr.To[int64](60)}).DoRaw(ctx)
			t.Logf("Logs of %s/%s (%v):\n%s", p.Name, c.Name, err, b)
		}
	}
}

// restrictedSecurityContext passes the restricted Pod Security level.
func restrictedSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// TestRestrictedPodRuns: a pod of the project's images, in a namespace
// enforcing the restricted level, is admitted, scheduled and started by the
// kubelet: the test workspace image's pulumi runs as an init container, the
// pause image keeps running, and the pod gets an address on the bridge. A
// privileged pod in the same namespace is refused.
func TestRestrictedPodRuns(t *testing.T) {
	ctx := context.Background()
	ns := restrictedNamespace(t)
	pods := testCluster.Client.CoreV1().Pods(ns)

	_, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "privileged"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "pause", Image: testImages.Pause, ImagePullPolicy: corev1.PullNever,
			SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
		}}},
	}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `violates PodSecurity "restricted`) {
		t.Fatalf("creating a privileged pod in a restricted namespace: got %v, want a PodSecurity violation", err)
	}

	start := time.Now()
	_, err = pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "workspace-image"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{
				Name: "pulumi", Image: testImages.Workspace, ImagePullPolicy: corev1.PullNever,
				Command:         []string{"/pulumi/bin/pulumi", "version"},
				Env:             []corev1.EnvVar{{Name: "PULUMI_HOME", Value: "/tmp/.pulumi"}},
				SecurityContext: restrictedSecurityContext(),
			}},
			Containers: []corev1.Container{{
				Name: "pause", Image: testImages.Pause, ImagePullPolicy: corev1.PullNever,
				SecurityContext: restrictedSecurityContext(),
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	substrate.Eventually(t, 2*time.Minute, "the pod Running or Failed", func() (bool, error) {
		pod, err = pods.Get(ctx, "workspace-image", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pod.Status.Phase == corev1.PodRunning || pod.Status.Phase == corev1.PodFailed, nil
	})
	if pod.Status.Phase != corev1.PodRunning {
		t.Fatalf("pod phase %s after 2 min; status %+v", pod.Status.Phase, pod.Status)
	}
	t.Logf("Pod Running %s after creation (as the kubelet reported it)", time.Since(start).Round(time.Millisecond))
	if pod.Spec.NodeName != "stackflow-node" {
		t.Errorf("node %q", pod.Spec.NodeName)
	}
	init := pod.Status.InitContainerStatuses
	if len(init) != 1 || init[0].State.Terminated == nil || init[0].State.Terminated.ExitCode != 0 {
		t.Errorf("init container (pulumi version) status %+v", init)
	}
	cs := pod.Status.ContainerStatuses
	if len(cs) != 1 || cs[0].State.Running == nil || !cs[0].Ready {
		t.Errorf("pause container status %+v", cs)
	}
	_, subnet, _ := net.ParseCIDR(testCluster.PodSubnet)
	if ip := net.ParseIP(pod.Status.PodIP); ip == nil || !subnet.Contains(ip) {
		t.Errorf("pod IP %q is not in the bridge network %s", pod.Status.PodIP, testCluster.PodSubnet)
	}
	if pod.Status.HostIP != testCluster.HostIP {
		t.Errorf("host IP %q, want %q", pod.Status.HostIP, testCluster.HostIP)
	}
	logs, err := pods.GetLogs("workspace-image", &corev1.PodLogOptions{Container: "pulumi"}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("init container logs (through the kubelet): %v", err)
	}
	if !strings.Contains(string(logs), "v3.") {
		t.Errorf("pulumi version printed %q", logs)
	}
}
