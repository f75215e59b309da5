//go:build cluster

package clustere2e

import (
	"context"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
)

// TestWorkspaceFailuresStallTheStack is issue 15's third end-to-end test:
// with a kubelet writing the pod statuses, a workspace whose image cannot
// start, and one whose program cannot be checked out in the pod, each show
// the reason on their Stack, Stalled.
func TestWorkspaceFailuresStallTheStack(t *testing.T) {
	ctx := context.Background()
	ns := restrictedNamespace(t)
	stateVolume(t, ns)
	repo, srv := servedRepo(t)
	repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": recordProgram})
	operatortest.StartOperator(t, testCluster.Config, podRuntimeOptions(t))

	// The image is not in containerd and may not be pulled (Never).
	noImage := workspaceStack(ns, "no-image", &pulumiv1.GitSource{ProjectRepo: repo.HTTPURL(srv), Branch: "main"})
	noImage.Spec.WorkspaceTemplate.Spec.Image = "stackflow.local/missing:cluster"
	// A commit the repository does not have: the agent's checkout fails.
	noCommit := workspaceStack(ns, "no-commit", &pulumiv1.GitSource{ProjectRepo: repo.HTTPURL(srv), Commit: strings.Repeat("0123456789", 4)})
	for _, s := range []*pulumiv1.Stack{noImage, noCommit} {
		if err := testClient.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		s    *pulumiv1.Stack
		want string
	}{
		{noImage, "ErrImageNeverPull"},
		{noCommit, "SourceUnavailable"},
	} {
		start := time.Now()
		waitStack(t, c.s, 4*time.Minute, "stalled", func(s *pulumiv1.Stack) bool {
			st := apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.StalledCondition)
			return st != nil && st.Status == metav1.ConditionTrue && strings.Contains(st.Reason+": "+st.Message, c.want)
		})
		st := apimeta.FindStatusCondition(c.s.Status.Conditions, pulumiv1.StalledCondition)
		t.Logf("%s Stalled after %s: %s: %s", c.s.Name, time.Since(start).Round(time.Millisecond), st.Reason, st.Message)
	}
}
