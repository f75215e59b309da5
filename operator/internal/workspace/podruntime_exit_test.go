package workspace

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
)

// TestAgentExit: the workspace container's termination, current or last, is
// described when it ended with an error at or after since; an OOM kill names
// the container's memory limit and what to raise.
func TestAgentExit(t *testing.T) {
	since := time.Date(2026, 12, 5, 21, 0, 0, 0, time.UTC)
	term := func(reason string, code int32, at time.Time) *corev1.ContainerStateTerminated {
		return &corev1.ContainerStateTerminated{Reason: reason, ExitCode: code, FinishedAt: metav1.NewTime(at)}
	}
	podWith := func(name string, current, last *corev1.ContainerStateTerminated) *corev1.Pod {
		p := &corev1.Pod{}
		p.Spec.Containers = []corev1.Container{{Name: pod.ContainerName, Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}}}}
		cs := corev1.ContainerStatus{Name: name}
		if current != nil {
			cs.State.Terminated = current
		} else {
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(since.Add(time.Minute))}
		}
		if last != nil {
			cs.LastTerminationState.Terminated = last
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
		return p
	}
	after := since.Add(30 * time.Second)
	for _, tc := range []struct {
		name string
		p    *corev1.Pod
		want []string // parts of the description; nil: none
	}{
		{"restarted after an OOM kill", podWith(pod.ContainerName, nil, term("OOMKilled", 137, after)),
			[]string{"OOMKilled: ", "memory limit of 64 MiB", "workspaceTemplate.spec.resources.limits.memory", "2026-12-05T21:00:30Z"}},
		{"terminated now by an error", podWith(pod.ContainerName, term("Error", 2, after), nil),
			[]string{"exited with Error (exit code 2)"}},
		{"OOM kill before since", podWith(pod.ContainerName, nil, term("OOMKilled", 137, since.Add(-time.Second))), nil},
		{"clean exit", podWith(pod.ContainerName, nil, term("Completed", 0, after)), nil},
		{"running, never ended", podWith(pod.ContainerName, nil, nil), nil},
		{"another container's kill", podWith(pod.BootstrapContainerName, nil, term("OOMKilled", 137, after)), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := agentExit(tc.p, since)
			if tc.want == nil {
				if got != "" {
					t.Fatalf("agentExit = %q, want none", got)
				}
				return
			}
			for _, part := range tc.want {
				if !strings.Contains(got, part) {
					t.Errorf("agentExit = %q, want it to hold %q", got, part)
				}
			}
		})
	}
}
