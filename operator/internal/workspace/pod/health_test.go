package pod

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
)

// t0 is when the test pods were created and started.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const testHash = "hash-1"

// testPod is a workspace pod at t0 with the current hash; each option sets
// what a kubelet would have written.
func testPod(opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "app-workspace-0", CreationTimestamp: metav1.NewTime(t0),
			Annotations: map[string]string{AnnotationPodSpecHash: testHash},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, StartTime: new(metav1.NewTime(t0))},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func bootstrapDone(p *corev1.Pod) {
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{
		Name: BootstrapContainerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}},
	}}
}

func pulumi(cs corev1.ContainerStatus) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		bootstrapDone(p)
		cs.Name = ContainerName
		p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	}
}

func waiting(reason, msg string) corev1.ContainerState {
	return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
}

func exited(reason string, code int32, msg string) *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{Reason: reason, ExitCode: code, Message: msg}
}

func running() corev1.ContainerState {
	return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0)}}
}

func TestClassify(t *testing.T) {
	crashed := func(restarts int32, msg string) func(*corev1.Pod) {
		return pulumi(corev1.ContainerStatus{
			RestartCount: restarts, State: waiting("CrashLoopBackOff", "back-off 40s restarting failed container=pulumi"),
			LastTerminationState: corev1.ContainerState{Terminated: exited("Error", 1, msg)},
		})
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		now  time.Time
		want HealthState
		// reason is the wanted Reason; parts must all be in the message, and
		// absent none of them.
		reason string
		parts  []string
		absent []string
		// recheck is the wanted RecheckAfter.
		recheck time.Duration
	}{{
		name: "no pod yet", pod: nil, now: t0, want: HealthStarting, parts: []string{"StatefulSet to create"},
	}, {
		name: "just created", pod: testPod(), now: t0, want: HealthStarting, parts: []string{"starting (Pending)"},
	}, {
		name: "an older pod being replaced",
		pod: testPod(func(p *corev1.Pod) {
			p.Annotations[AnnotationPodSpecHash] = "old"
			crashed(5, "boom")(p)
		}),
		now: t0, want: HealthStarting, parts: []string{"being replaced"},
	}, {
		name: "being deleted",
		pod:  testPod(func(p *corev1.Pod) { p.DeletionTimestamp = new(metav1.NewTime(t0)) }),
		now:  t0, want: HealthStarting, parts: []string{"being deleted"},
	}, {
		name: "bootstrap running",
		pod: testPod(func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: BootstrapContainerName, State: running()}}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: waiting("PodInitializing", "")}}
		}),
		now: t0, want: HealthStarting, parts: []string{"initialising (init container bootstrap)"},
	}, {
		name: "agent preparing", pod: testPod(pulumi(corev1.ContainerStatus{State: running()})),
		now: t0.Add(5 * time.Minute), want: HealthStarting, parts: []string{"fetching the program"},
	}, {
		name: "ready",
		pod: testPod(pulumi(corev1.ContainerStatus{State: running(), Ready: true}), func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodRunning
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}),
		now: t0, want: HealthReady,
	}, {
		name: "ready after crashing: recovered",
		pod: testPod(crashed(7, "SourceUnavailable: commit 0123 not found"), func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State, p.Status.ContainerStatuses[0].Ready = running(), true
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}),
		now: t0, want: HealthReady,
	}, {
		name:   "image pull failing, within a minute",
		pod:    testPod(pulumi(corev1.ContainerStatus{State: waiting("ErrImagePull", "failed to pull image \"pulumi/nope:1\": not found")})),
		now:    t0.Add(20 * time.Second),
		want:   HealthRetrying,
		reason: autov1alpha1.WorkspaceReasonImagePullFailed,
		parts:  []string{"container pulumi: ErrImagePull: failed to pull image \"pulumi/nope:1\": not found"}, recheck: 40 * time.Second,
	}, {
		name:   "image pull back-off after a minute",
		pod:    testPod(pulumi(corev1.ContainerStatus{State: waiting("ImagePullBackOff", "Back-off pulling image \"pulumi/nope:1\"")})),
		now:    t0.Add(61 * time.Second),
		want:   HealthFailed,
		reason: autov1alpha1.WorkspaceReasonImagePullFailed, parts: []string{"container pulumi: ImagePullBackOff: Back-off pulling image"},
	}, {
		name: "image pull age from creation when not started",
		pod: testPod(pulumi(corev1.ContainerStatus{State: waiting("ImagePullBackOff", "")}), func(p *corev1.Pod) {
			p.Status.StartTime = nil
		}),
		now: t0.Add(2 * time.Minute), want: HealthFailed, reason: autov1alpha1.WorkspaceReasonImagePullFailed,
	}, {
		name: "invalid image name: failed at once",
		pod:  testPod(pulumi(corev1.ContainerStatus{State: waiting("InvalidImageName", "Failed to apply default image tag \"Pulumi::x\"")})),
		now:  t0, want: HealthFailed, reason: autov1alpha1.WorkspaceReasonImagePullFailed, parts: []string{"InvalidImageName"},
	}, {
		name: "bootstrap image cannot be pulled",
		pod: testPod(func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: BootstrapContainerName, State: waiting("ErrImagePull", "manifest unknown")}}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: waiting("PodInitializing", "")}}
		}),
		now: t0, want: HealthRetrying, reason: autov1alpha1.WorkspaceReasonImagePullFailed,
		parts: []string{"container bootstrap: ErrImagePull: manifest unknown"}, recheck: time.Minute,
	}, {
		name: "missing secret key: failed at once",
		pod:  testPod(pulumi(corev1.ContainerStatus{State: waiting("CreateContainerConfigError", "couldn't find key token in Secret infra/git")})),
		now:  t0, want: HealthFailed, reason: autov1alpha1.WorkspaceReasonContainerConfigInvalid,
		parts: []string{"container pulumi: CreateContainerConfigError: couldn't find key token in Secret infra/git"},
	}, {
		name: "create container error, retried for a minute",
		pod:  testPod(pulumi(corev1.ContainerStatus{State: waiting("CreateContainerError", "context deadline exceeded")})),
		now:  t0.Add(30 * time.Second), want: HealthRetrying, reason: autov1alpha1.WorkspaceReasonContainerConfigInvalid, recheck: 30 * time.Second,
	}, {
		name: "create container error, then failed",
		pod:  testPod(pulumi(corev1.ContainerStatus{State: waiting("CreateContainerError", "context deadline exceeded")})),
		now:  t0.Add(90 * time.Second), want: HealthFailed, reason: autov1alpha1.WorkspaceReasonContainerConfigInvalid,
	}, {
		name: "first crash: retrying with the last log line",
		pod:  testPod(crashed(1, "Fetching program source\nconnecting to db\npanic: nil pointer dereference\n\n")),
		now:  t0, want: HealthRetrying, reason: autov1alpha1.WorkspaceReasonCrashLooping,
		parts:  []string{"container pulumi exited with Error (exit code 1, restarted 1 time, CrashLoopBackOff): panic: nil pointer dereference"},
		absent: []string{"connecting to db"},
	}, {
		name: "crash loop: failed after 3 restarts",
		pod:  testPod(crashed(3, "panic: boom")),
		now:  t0, want: HealthFailed, reason: autov1alpha1.WorkspaceReasonCrashLooping, parts: []string{"restarted 3 times", "panic: boom"},
	}, {
		name: "crash loop: still failed while the container runs again",
		pod: testPod(crashed(4, "panic: boom"), func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State = running()
		}),
		now: t0, want: HealthFailed, reason: autov1alpha1.WorkspaceReasonCrashLooping, parts: []string{"panic: boom"},
	}, {
		name: "out of memory",
		pod: testPod(pulumi(corev1.ContainerStatus{
			RestartCount: 3, State: waiting("CrashLoopBackOff", ""),
			LastTerminationState: corev1.ContainerState{Terminated: exited("OOMKilled", 137, "")},
		})),
		now: t0, want: HealthFailed, reason: autov1alpha1.WorkspaceReasonCrashLooping,
		parts: []string{"container pulumi exited with OOMKilled (exit code 137, restarted 3 times, CrashLoopBackOff)"},
	}, {
		name: "terminated now, not yet restarted",
		pod:  testPod(pulumi(corev1.ContainerStatus{State: corev1.ContainerState{Terminated: exited("Error", 2, "fatal: bad flag")}})),
		now:  t0, want: HealthRetrying, reason: autov1alpha1.WorkspaceReasonCrashLooping, parts: []string{"exit code 2): fatal: bad flag"},
	}, {
		name: "agent reports a missing source: failed at once",
		pod:  testPod(crashed(0, "SourceUnavailable: commit 0123456789abcdef0123456789abcdef01234567 not found in https://github.com/acme/app.git\n")),
		now:  t0, want: HealthFailed, reason: autov1alpha1.WorkspaceReasonSourceUnavailable,
		parts:  []string{"commit 0123456789abcdef0123456789abcdef01234567 not found in https://github.com/acme/app.git (container pulumi exited with Error (exit code 1"},
		absent: []string{"SourceUnavailable:"},
	}, {
		name: "agent reports pulumi install failing: retried",
		pod:  testPod(crashed(1, "InstallationFailed: install dependencies (pulumi install): npm ERR! 404")),
		now:  t0, want: HealthRetrying, reason: autov1alpha1.WorkspaceReasonInstallationFailed, parts: []string{"npm ERR! 404"},
	}, {
		name: "agent reports pulumi install failing: failed after 3 restarts",
		pod:  testPod(crashed(3, "InstallationFailed: install dependencies (pulumi install): npm ERR! 404")),
		now:  t0, want: HealthFailed, reason: autov1alpha1.WorkspaceReasonInstallationFailed,
	}, {
		name: "bootstrap crash loop",
		pod: testPod(func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{
				Name: BootstrapContainerName, RestartCount: 3, State: waiting("CrashLoopBackOff", ""),
				LastTerminationState: corev1.ContainerState{Terminated: exited("Error", 1, "agent install: open /share/agent.tmp: read-only file system")},
			}}
		}),
		now: t0, want: HealthFailed, reason: autov1alpha1.WorkspaceReasonCrashLooping, parts: []string{"container bootstrap exited", "read-only file system"},
	}, {
		name: "crash loop without a termination record",
		pod:  testPod(pulumi(corev1.ContainerStatus{RestartCount: 5, State: waiting("CrashLoopBackOff", "back-off 5m0s")})),
		now:  t0, want: HealthFailed, reason: autov1alpha1.WorkspaceReasonCrashLooping, parts: []string{"container pulumi: CrashLoopBackOff: back-off 5m0s"},
	}, {
		name: "unschedulable: retrying with the scheduler's message",
		pod: testPod(func(p *corev1.Pod) {
			p.Status.StartTime = nil
			p.Status.Conditions = []corev1.PodCondition{{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
				Message: "0/3 nodes are available: 3 Insufficient memory.", LastTransitionTime: metav1.NewTime(t0),
			}}
		}),
		now: t0.Add(time.Minute), want: HealthRetrying, reason: autov1alpha1.WorkspaceReasonUnschedulable,
		parts: []string{"cannot be scheduled: 0/3 nodes are available: 3 Insufficient memory."}, recheck: 4 * time.Minute,
	}, {
		name: "unschedulable for 5 minutes",
		pod: testPod(func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", LastTransitionTime: metav1.NewTime(t0),
			}}
		}),
		now: t0.Add(5 * time.Minute), want: HealthFailed, reason: autov1alpha1.WorkspaceReasonUnschedulable,
	}, {
		name: "evicted",
		pod: testPod(func(p *corev1.Pod) {
			p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: ephemeral-storage."
		}),
		now: t0, want: HealthRetrying, reason: autov1alpha1.WorkspaceReasonPodFailed, parts: []string{"failed (Evicted): The node was low on resource: ephemeral-storage."},
	}, {
		name: "a long line is capped",
		pod:  testPod(crashed(0, strings.Repeat("x", 2000))),
		now:  t0, want: HealthRetrying, reason: autov1alpha1.WorkspaceReasonCrashLooping, parts: []string{strings.Repeat("x", maxLineLength) + "…"},
		absent: []string{strings.Repeat("x", maxLineLength+1)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := Classify(tt.pod, testHash, tt.now, Thresholds{})
			if h.State != tt.want || h.Reason != tt.reason || h.RecheckAfter != tt.recheck {
				t.Fatalf("Classify = %s %q (recheck %s): %s; want %s %q (recheck %s)", h.State, h.Reason, h.RecheckAfter, h.Message, tt.want, tt.reason, tt.recheck)
			}
			for _, p := range tt.parts {
				if !strings.Contains(h.Message, p) {
					t.Errorf("message %q lacks %q", h.Message, p)
				}
			}
			for _, p := range tt.absent {
				if strings.Contains(h.Message, p) {
					t.Errorf("message %q has %q", h.Message, p)
				}
			}
		})
	}
}

// TestClassifyThresholds: the thresholds are options.
func TestClassifyThresholds(t *testing.T) {
	crash := testPod(pulumi(corev1.ContainerStatus{
		RestartCount: 1, State: waiting("CrashLoopBackOff", ""),
		LastTerminationState: corev1.ContainerState{Terminated: exited("Error", 1, "x")},
	}))
	if h := Classify(crash, testHash, t0, Thresholds{CrashLoopRestarts: 1}); h.State != HealthFailed {
		t.Errorf("CrashLoopRestarts 1: %s", h.State)
	}
	pull := testPod(pulumi(corev1.ContainerStatus{State: waiting("ErrImagePull", "")}))
	if h := Classify(pull, testHash, t0.Add(10*time.Second), Thresholds{ImagePull: 10 * time.Second}); h.State != HealthFailed {
		t.Errorf("ImagePull 10s: %s", h.State)
	}
	if h := Classify(pull, testHash, t0.Add(10*time.Second), Thresholds{}); h.State != HealthRetrying {
		t.Errorf("default ImagePull: %s", h.State)
	}
}

func TestSecretNames(t *testing.T) {
	spec := &corev1.PodSpec{
		InitContainers: []corev1.Container{{Env: []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "init"}}}}}}},
		Containers: []corev1.Container{{
			Env: []corev1.EnvVar{
				{Name: "B", Value: "plain"},
				{Name: "C", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "token"}}}},
				{Name: "D", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "not-a-secret"}}}},
			},
			EnvFrom: []corev1.EnvFromSource{
				{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "bulk"}}},
				{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}},
			},
		}},
		Volumes: []corev1.Volume{
			{Name: "v", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "files"}}},
			{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "projected"}}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "token"}}},
			}}}},
		},
	}
	got := strings.Join(SecretNames(spec), ",")
	if want := "bulk,files,init,projected,token"; got != want {
		t.Fatalf("SecretNames = %s, want %s", got, want)
	}
}
