//go:build cluster

package clustere2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
)

// TestMemoryLimitIsEnforced is issue 15's fourth end-to-end test: the
// workspace container's memory limit from workspaceTemplate is enforced by
// the kubelet (cgroup v1 memory controller): pulumi, which needs more than
// the limit, is killed by the OOM killer, and the Stack says so (the agent
// reads its cgroup's OOM kill count; the container itself keeps running, so
// the kubelet reports nothing).
func TestMemoryLimitIsEnforced(t *testing.T) {
	ctx := context.Background()
	ns := restrictedNamespace(t)
	stateVolume(t, ns)
	repo, srv := servedRepo(t)
	repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": recordProgram})
	operatortest.StartOperator(t, testCluster.Config, podRuntimeOptions(t))

	s := workspaceStack(ns, "small", &pulumiv1.GitSource{ProjectRepo: repo.HTTPURL(srv), Branch: "main"})
	limit := resource.MustParse("64Mi")
	s.Spec.WorkspaceTemplate.Spec.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: limit, corev1.ResourceCPU: resource.MustParse("100m")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: limit},
	}
	if err := testClient.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitStack(t, s, 4*time.Minute, "reported OOM-killed", func(s *pulumiv1.Stack) bool {
		r := apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.ReadyCondition)
		return r != nil && r.Status == metav1.ConditionFalse && strings.Contains(r.Message, "OOMKilled") && strings.Contains(r.Message, "64 MiB")
	})
	b, _ := json.Marshal(s.Status.Conditions)
	t.Logf("After %s: %s", time.Since(start).Round(time.Millisecond), b)
	p, err := testCluster.Client.CoreV1().Pods(ns).Get(ctx, "small-workspace-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := json.Marshal(p.Status.ContainerStatuses)
	t.Logf("Workspace pod: %s", ps)
}
