package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/workspace"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
)

// testClock is a clock the test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestPodRuntimeWorkspaceFailures runs a Stack with the pod runtime. There is
// no StatefulSet controller or kubelet here, so the test creates the
// workspace pod as the StatefulSet controller would and writes the statuses a
// kubelet would: an image that cannot be pulled shows on the Workspace and the
// Stack as Reconciling with the kubelet's reason, then Stalled once the pod is
// older than the threshold (the pod runtime's clock is moved); a crash loop
// whose termination message holds secret values stalls them with the
// redacted last line, and no secret value reaches a status or an event; the
// pod becoming ready clears Stalled.
func TestPodRuntimeWorkspaceFailures(t *testing.T) {
	ns := cp.Namespace(t)
	clock := &testClock{t: time.Now()}
	startOperator(t, operator.Options{Runtime: operator.RuntimePod, PodClock: clock.Now, Pod: pod.Options{
		AgentImage: "stackflow/operator:test", DefaultPulumiImage: "pulumi/pulumi:3.274.1-nonroot",
	}})
	ctx := context.Background()
	const password = "s3cr3t-pa55word-9f1c"
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-secrets"}, StringData: map[string]string{"password": password}}
	if err := cp.Client.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	s := newStack(ns, "broken", pulumiv1.StackSpec{Stack: "broken",
		GitSource: gitSpec("https://git.example.com/acme/app.git", "", strings.Repeat("ab", 20)),
		Config:    cfg("recordName", "broken", "content", "x"),
		SecretRefs: map[string]pulumiv1.ResourceRef{"password": {SelectorType: pulumiv1.ResourceSelectorSecret,
			ResourceSelector: pulumiv1.ResourceSelector{SecretRef: &pulumiv1.SecretSelector{Name: "app-secrets", Key: "password"}}}},
	})
	if err := cp.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	var sts appsv1.StatefulSet
	eventually(t, time.Minute, "the workspace StatefulSet", func() (bool, error) {
		err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: pod.Name("broken")}, &sts)
		return err == nil, err
	})
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "broken"}}
	if err := get(t, ws); err != nil {
		t.Fatal(err)
	}
	var token corev1.Secret
	if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: workspace.TokenSecretName(ws)}, &token); err != nil {
		t.Fatal(err)
	}
	agentToken := string(token.Data["token"])
	p := statefulSetPod(t, &sts)

	// (a) The image cannot be pulled: retrying, then stalled.
	written := time.Now()
	started := metav1.NewTime(clock.Now())
	kubelet(t, p, func(st *corev1.PodStatus) {
		st.Phase, st.StartTime = corev1.PodPending, &started
		st.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: started}}
		st.InitContainerStatuses = []corev1.ContainerStatus{bootstrapCompleted()}
		st.ContainerStatuses = []corev1.ContainerStatus{{Name: pod.ContainerName, Image: "pulumi/pulumi:3.274.1-nonroot",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull",
				Message: `failed to pull and unpack image "docker.io/pulumi/pulumi:3.274.1-nonroot": not found`}}}}
	})
	waitWorkspace(t, ws, time.Minute, "not ready, retrying the image pull", func(ws *autov1alpha1.Workspace) bool {
		ready := apimeta.FindStatusCondition(ws.Status.Conditions, autov1alpha1.WorkspaceReady)
		return ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == autov1alpha1.WorkspaceReasonImagePullFailed &&
			!apimeta.IsStatusConditionTrue(ws.Status.Conditions, autov1alpha1.WorkspaceStalled)
	})
	waitStack(t, s, time.Minute, "reconciling with the kubelet's reason", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.ReconcilingCondition)
		return c != nil && c.Status == metav1.ConditionTrue && condition(s, pulumiv1.StalledCondition) == nil &&
			strings.Contains(c.Message, "waiting for the workspace: container pulumi: ErrImagePull: failed to pull")
	})
	t.Logf("Stack Reconciling %s after the kubelet's ErrImagePull: %s", time.Since(written).Round(time.Millisecond), condition(s, pulumiv1.ReconcilingCondition).Message)
	// A kubelet backs off and keeps failing; past the threshold it is stalled.
	clock.Advance(2 * time.Minute)
	kubelet(t, p, func(st *corev1.PodStatus) {
		st.ContainerStatuses[0].State.Waiting = &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff",
			Message: `Back-off pulling image "pulumi/pulumi:3.274.1-nonroot"`}
	})
	waitWorkspace(t, ws, time.Minute, "stalled on the image pull", workspaceStalledWith(autov1alpha1.WorkspaceReasonImagePullFailed, "ImagePullBackOff"))
	waitStack(t, s, time.Minute, "stalled on the image pull", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.StalledCondition)
		return c != nil && c.Reason == pulumiv1.StalledWorkspaceFailedReason &&
			strings.Contains(c.Message, `workspace failed: container pulumi: ImagePullBackOff: Back-off pulling image`)
	})
	t.Logf("Stack Stalled: %s", condition(s, pulumiv1.StalledCondition).Message)

	// (b) The image pulled; the agent crashes with secret values in its last
	// words, restarted three times.
	lastWords := "Fetching program source\nconnecting with " + password + " and token " + agentToken +
		" to https://bot:" + password + "@git.example.com/acme/app.git failed\n\n"
	kubelet(t, p, func(st *corev1.PodStatus) {
		st.Phase = corev1.PodRunning
		st.ContainerStatuses = []corev1.ContainerStatus{{Name: pod.ContainerName, Image: "pulumi/pulumi:3.274.1-nonroot", RestartCount: 3,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
				Message: "back-off 40s restarting failed container=pulumi pod=broken-workspace-0"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				Reason: "Error", ExitCode: 1, Message: lastWords, StartedAt: started, FinishedAt: started}},
		}}
	})
	const redacted = "connecting with [secret] and token [secret] to https://***@git.example.com/acme/app.git failed"
	waitWorkspace(t, ws, time.Minute, "stalled on the crash loop", workspaceStalledWith(autov1alpha1.WorkspaceReasonCrashLooping, redacted))
	waitStack(t, s, time.Minute, "stalled on the crash loop", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.StalledCondition)
		return c != nil && c.Reason == pulumiv1.StalledWorkspaceFailedReason &&
			strings.Contains(c.Message, "container pulumi exited with Error (exit code 1, restarted 3 times, CrashLoopBackOff): "+redacted)
	})
	t.Logf("Stack Stalled: %s", condition(s, pulumiv1.StalledCondition).Message)
	// One Warning event per change: the failing pull, the stalled pull, the
	// crash loop; none carries a secret.
	var events []corev1.Event
	eventually(t, time.Minute, "the crash loop's Warning event", func() (bool, error) {
		var list corev1.EventList
		if err := cp.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		events = list.Items
		for _, e := range events {
			if e.InvolvedObject.Kind == "Workspace" && e.Type == corev1.EventTypeWarning && e.Reason == autov1alpha1.WorkspaceReasonCrashLooping {
				return true, nil
			}
		}
		return false, nil
	})
	pulls := 0
	for _, e := range events {
		if e.InvolvedObject.Kind == "Workspace" && e.Reason == autov1alpha1.WorkspaceReasonImagePullFailed {
			pulls += int(max(e.Count, 1))
		}
	}
	if pulls < 1 || pulls > 2 {
		t.Errorf("%d ImagePullFailed events, want one when it started failing and one when it stalled", pulls)
	}
	if err := get(t, ws); err != nil {
		t.Fatal(err)
	}
	if err := get(t, s); err != nil {
		t.Fatal(err)
	}
	for what, v := range map[string]any{"workspace status": ws.Status, "stack status": s.Status, "events": events} {
		b, _ := json.Marshal(v)
		for _, secret := range []string{password, agentToken} {
			if strings.Contains(string(b), secret) {
				t.Errorf("a secret value reached the %s: %s", what, b)
			}
		}
	}

	// (c) The pod becomes ready: no longer stalled.
	kubelet(t, p, func(st *corev1.PodStatus) {
		st.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(clock.Now())}}
		st.ContainerStatuses[0].Ready, st.ContainerStatuses[0].Started = true, new(true)
		st.Conditions = append(st.Conditions,
			corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(clock.Now())},
			corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(clock.Now())})
	})
	waitWorkspace(t, ws, time.Minute, "no longer stalled", func(ws *autov1alpha1.Workspace) bool {
		ready := apimeta.FindStatusCondition(ws.Status.Conditions, autov1alpha1.WorkspaceReady)
		return ready != nil && ready.Reason == autov1alpha1.WorkspaceReasonInitializing &&
			apimeta.FindStatusCondition(ws.Status.Conditions, autov1alpha1.WorkspaceStalled) == nil
	})
	waitStack(t, s, time.Minute, "no longer stalled", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.ReconcilingCondition)
		return condition(s, pulumiv1.StalledCondition) == nil && c != nil && strings.Contains(c.Message, "waiting for the workspace")
	})
}

// statefulSetPod creates the StatefulSet's pod as its controller would: the
// template's labels, annotations and spec, owned by the StatefulSet.
func statefulSetPod(t *testing.T, sts *appsv1.StatefulSet) *corev1.Pod {
	t.Helper()
	tmpl := sts.Spec.Template
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: sts.Namespace, Name: sts.Name + "-0",
			Labels: tmpl.Labels, Annotations: tmpl.Annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID,
				Controller: new(true), BlockOwnerDeletion: new(true),
			}},
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	p.Spec.Hostname, p.Spec.Subdomain = p.Name, sts.Spec.ServiceName
	if err := cp.Client.Create(context.Background(), p); err != nil {
		t.Fatalf("create the workspace pod: %v", err)
	}
	return p
}

// kubelet writes the pod's status as a kubelet would, through the status
// subresource.
func kubelet(t *testing.T, p *corev1.Pod, change func(*corev1.PodStatus)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := get(t, p); err != nil {
			return err
		}
		change(&p.Status)
		return cp.Client.Status().Update(context.Background(), p)
	})
	if err != nil {
		t.Fatalf("write the pod status: %v", err)
	}
}

func bootstrapCompleted() corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: pod.BootstrapContainerName, Image: "stackflow/operator:test",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", ExitCode: 0}}}
}

// waitWorkspace waits until cond holds for the Workspace, reporting its
// conditions on timeout.
func waitWorkspace(t *testing.T, ws *autov1alpha1.Workspace, timeout time.Duration, what string, cond func(*autov1alpha1.Workspace) bool) {
	t.Helper()
	eventually(t, timeout, "workspace "+ws.Name+" "+what, func() (bool, error) {
		if err := get(t, ws); err != nil {
			return false, err
		}
		b, _ := json.Marshal(ws.Status.Conditions)
		return cond(ws), fmt.Errorf("conditions %s", b)
	})
}

// workspaceStalledWith: the Workspace is Stalled (and not Ready) for reason, with msg
// in the message.
func workspaceStalledWith(reason, msg string) func(*autov1alpha1.Workspace) bool {
	return func(ws *autov1alpha1.Workspace) bool {
		st := apimeta.FindStatusCondition(ws.Status.Conditions, autov1alpha1.WorkspaceStalled)
		ready := apimeta.FindStatusCondition(ws.Status.Conditions, autov1alpha1.WorkspaceReady)
		return st != nil && st.Status == metav1.ConditionTrue && st.Reason == reason && strings.Contains(st.Message, msg) &&
			ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == reason
	}
}

// TestStackPinnedToMissingCommit: with the local runtime, a Stack pinned to a
// well-formed commit its repository does not have stalls with
// SourceUnavailable naming the commit (the agent reports it), and a fixed
// commit deploys.
func TestStackPinnedToMissingCommit(t *testing.T) {
	e, repo := stackEnv(t)
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})
	missing := strings.Repeat("0123456789", 4)
	s := newStack(e.ns, "ghost", pulumiv1.StackSpec{Stack: "ghost", GitSource: gitSpec(repo.URL(), "", missing),
		Config: cfg("recordName", "ghost", "content", "found")})
	if err := cp.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitStack(t, s, 3*time.Minute, "stalled on the missing commit", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.StalledCondition)
		return c != nil && c.Reason == pulumiv1.StalledSourceUnavailableReason &&
			strings.Contains(c.Message, "commit "+missing+" not found in "+repo.URL())
	})
	t.Logf("Stack Stalled (%s): %s", condition(s, pulumiv1.StalledCondition).Reason, condition(s, pulumiv1.StalledCondition).Message)
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "ghost"}}
	if err := get(t, ws); err != nil {
		t.Fatal(err)
	}
	if !workspaceStalledWith(autov1alpha1.WorkspaceReasonSourceUnavailable, missing)(ws) {
		t.Fatalf("workspace conditions: %+v", ws.Status.Conditions)
	}
	mutateStack(t, s, func(s *pulumiv1.Stack) { s.Spec.Commit = sha })
	waitStack(t, s, 3*time.Minute, "ready at the existing commit", readyAt(sha))
	if got, _ := e.pe.Record(t, "ghost"); got != "found" {
		t.Fatalf("record = %q", got)
	}
}

// TestStackMovedToMissingCommitInPlace: a deployed Stack moved to a commit its
// repository does not have keeps its agent (the in-place checkout fails, the
// previous revision stays), stalls with SourceUnavailable naming the commit,
// and deploys a commit that exists through the same agent process.
func TestStackMovedToMissingCommitInPlace(t *testing.T) {
	e, repo := stackEnv(t)
	sha1 := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})
	s := newStack(e.ns, "mover", pulumiv1.StackSpec{Stack: "mover", GitSource: gitSpec(repo.URL(), "", sha1),
		Config: cfg("recordName", "mover", "content", "one")})
	if err := cp.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitStack(t, s, 3*time.Minute, "ready at the first commit", readyAt(sha1))
	pid := agentPID(t, e, "mover")

	missing := strings.Repeat("0123456789", 4)
	mutateStack(t, s, func(s *pulumiv1.Stack) { s.Spec.Commit = missing })
	waitStack(t, s, 2*time.Minute, "stalled on the missing commit", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.StalledCondition)
		return c != nil && c.Reason == pulumiv1.StalledSourceUnavailableReason &&
			strings.Contains(c.Message, "commit "+missing+" not found in "+repo.URL()) &&
			strings.Contains(c.Message, "the agent keeps "+sha1[:7])
	})
	t.Logf("Stack Stalled: %s", condition(s, pulumiv1.StalledCondition).Message)
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "mover"}}
	if err := get(t, ws); err != nil {
		t.Fatal(err)
	}
	if !workspaceStalledWith(autov1alpha1.WorkspaceReasonSourceUnavailable, missing)(ws) {
		t.Fatalf("workspace conditions: %+v", ws.Status.Conditions)
	}

	sha2 := repo.Commit(t, "v2", map[string]string{"Pulumi.yaml": strings.Replace(stackProgram, "content: ${content}", "content: moved-${content}", 1)})
	mutateStack(t, s, func(s *pulumiv1.Stack) { s.Spec.Commit = sha2 })
	waitStack(t, s, 2*time.Minute, "ready at the existing commit", readyAt(sha2))
	if got, _ := e.pe.Record(t, "mover"); got != "moved-one" {
		t.Fatalf("record = %q", got)
	}
	if got := agentPID(t, e, "mover"); got != pid {
		t.Fatalf("agent process replaced: pid %d, was %d", got, pid)
	}
}
