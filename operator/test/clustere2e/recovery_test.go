//go:build cluster

package clustere2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	"github.com/stackflow-io/stackflow/test/framework/provider"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestWorkspacePodKilledMidUpdate is issue 15's second end-to-end test: the
// workspace pod is deleted (grace period 1 s) while an update holds the
// stack's lock (the test provider waits while a hold file exists); the
// StatefulSet recreates the pod, the stale lock is recovered, the update is
// retried and succeeds, and the backend's history has the commit once.
func TestWorkspacePodKilledMidUpdate(t *testing.T) {
	ctx := context.Background()
	ns := restrictedNamespace(t)
	state := stateVolume(t, ns)
	hold := filepath.Join(state, "hold")
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	repo, srv := servedRepo(t)
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": recordProgram})
	operatortest.StartOperator(t, testCluster.Config, podRuntimeOptions(t))

	s := workspaceStack(ns, "killed", &pulumiv1.GitSource{ProjectRepo: repo.HTTPURL(srv), Branch: "main"})
	s.Spec.EnvRefs[provider.HoldEnv] = literal("/state/hold")
	if err := testClient.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	// The update is running once the file backend holds the stack's lock.
	locks := filepath.Join(state, ".pulumi", "locks", "*", "*", "killed", "*.json")
	substrate.Eventually(t, 4*time.Minute, "the update to hold the stack's lock", func() (bool, error) {
		m, err := filepath.Glob(locks)
		return len(m) > 0, err
	})
	pods := testCluster.Client.CoreV1().Pods(ns)
	old, err := pods.Get(ctx, pod.PodName("killed"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Not 0: a force deletion removes the pod object before its containers
	// are dead, and the StatefulSet's replacement then runs beside the old
	// pod, both updating the stack (Kubernetes documents that force deletion
	// breaks a StatefulSet's at-most-one guarantee; a run here saw the commit
	// applied twice). With a grace period the kubelet kills the pod (SIGTERM,
	// SIGKILL a second later) before the StatefulSet replaces it.
	if err := pods.Delete(ctx, old.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)}); err != nil {
		t.Fatal(err)
	}
	substrate.Eventually(t, 2*time.Minute, "the StatefulSet to recreate the pod", func() (bool, error) {
		p, err := pods.Get(ctx, old.Name, metav1.GetOptions{})
		return err == nil && p.UID != old.UID && p.Status.Phase == corev1.PodRunning, nil
	})
	t.Logf("Pod recreated and Running %s after the delete", time.Since(start).Round(time.Millisecond))
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	waitStack(t, s, 4*time.Minute, "ready after the pod was killed", readyAt(sha))
	t.Logf("Stack Ready %s after the delete", time.Since(start).Round(time.Millisecond))
	// Applied once: one succeeded update. The killed run may be recorded as
	// failed, when pulumi, interrupted by the agent's SIGTERM handling,
	// writes its history within the grace period.
	all := updates(t, state, "killed")
	t.Logf("backend history: %+v", all)
	if h := history(t, state, "killed"); len(h) != 1 || h[0] != sha {
		t.Errorf("backend history: succeeded updates at %v, want the commit once (all: %+v)", h, all)
	}
	for _, u := range all {
		if u.Result != "succeeded" && u.Result != "failed" {
			t.Errorf("backend history has an update %q at %s", u.Result, u.Head)
		}
	}
	if m, _ := filepath.Glob(locks); len(m) != 0 {
		t.Errorf("locks left: %v", m)
	}
	b, _ := json.Marshal(s.Status.LastUpdate)
	t.Logf("lastUpdate %s", b)
}
