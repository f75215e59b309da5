package workspace

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
)

var _ ExitReporter = (*PodRuntime)(nil)

// AgentExit reads the workspace pod's container (cached): its termination,
// current or last, when it ended at or after since with an error. The
// kernel's OOM killer may pick the agent itself rather than the operation's
// pulumi (whose kill the agent reports): the container then restarts and
// only the kubelet knows why.
func (r *PodRuntime) AgentExit(ctx context.Context, ws *autov1alpha1.Workspace, since time.Time) (string, error) {
	var p corev1.Pod
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ws.Namespace, Name: pod.PodName(ws.Name)}, &p); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("get workspace pod: %w", err)
	}
	return agentExit(&p, since), nil
}

// agentExit describes the workspace container's termination in p, current
// or last, that ended at or after since with an error; "" when there is none.
func agentExit(p *corev1.Pod, since time.Time) string {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != pod.ContainerName {
			continue
		}
		term := cs.State.Terminated
		if term == nil {
			term = cs.LastTerminationState.Terminated
		}
		if term == nil || term.ExitCode == 0 || term.FinishedAt.Time.Before(since) {
			return ""
		}
		at := term.FinishedAt.UTC().Format(time.RFC3339)
		if term.Reason == "OOMKilled" {
			limit := "its memory limit"
			for _, c := range p.Spec.Containers {
				if q, ok := c.Resources.Limits[corev1.ResourceMemory]; c.Name == pod.ContainerName && ok {
					limit = fmt.Sprintf("its memory limit of %d MiB", q.Value()>>20)
				}
			}
			return fmt.Sprintf("OOMKilled: the workspace container, its agent included, was killed at %s for exceeding %s (raise workspaceTemplate.spec.resources.limits.memory)", at, limit)
		}
		how := term.Reason
		if how == "" {
			how = "an error"
		}
		return fmt.Sprintf("the workspace container exited with %s (exit code %d) at %s", how, term.ExitCode, at)
	}
	return ""
}
