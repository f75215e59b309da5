package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

// TestUpdatesDoNotHoldWorkers: 20 Updates of 20 Workspaces, each taking at
// least 5 s, with the Update controller limited to 2 workers, are all in flight
// at once — starting an operation never waits for another to end.
func TestUpdatesDoNotHoldWorkers(t *testing.T) {
	const n = 20
	e := newEnv(t)
	e.opts.UpdateWorkers = 2
	e.opts.WorkspaceWorkers = 4
	startOperator(t, e.opts)
	repo := gitrepo.New(t)
	repo.Commit(t, "program", map[string]string{"Pulumi.yaml": recordProgram})
	ctx := context.Background()

	var wss []*autov1alpha1.Workspace
	for i := range n {
		ws := newWorkspace(e.ns, fmt.Sprintf("w%02d", i), repo.URL(),
			stackConfig("content", "c", "recordName", fmt.Sprintf("rec-%02d", i), "sleep", 5))
		ws.Spec.Stacks[0].Name = ws.Name // one Pulumi stack each: no real conflicts
		if err := cp.Client.Create(ctx, ws); err != nil {
			t.Fatal(err)
		}
		wss = append(wss, ws)
	}
	for _, ws := range wss {
		waitWorkspaceReady(t, ws, 5*time.Minute)
	}
	var ups []*autov1alpha1.Update
	for _, ws := range wss {
		u := newUpdate(e.ns, ws.Name+"-up", ws.Name, autov1alpha1.UpType)
		u.Spec.StackName = ws.Name
		if err := cp.Client.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
		ups = append(ups, u)
	}
	for _, u := range ups {
		waitComplete(t, u, 5*time.Minute)
		if !succeeded(u) {
			t.Fatalf("%s: %s %q", u.Name, reason(u), u.Status.Message)
		}
	}
	var starts, ends []time.Time
	for _, u := range ups {
		if d := u.Status.EndTime.Sub(u.Status.StartTime.Time); d < 5*time.Second {
			t.Fatalf("%s took %s, want ≥ 5s (the record sleeps 5s)", u.Name, d)
		}
		starts = append(starts, u.Status.StartTime.Time)
		ends = append(ends, u.Status.EndTime.Time)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	sort.Slice(ends, func(i, j int) bool { return ends[i].Before(ends[j]) })
	if !starts[n-1].Before(ends[0]) {
		t.Fatalf("not all %d updates were in flight at once: the last started at %s, after the first ended at %s",
			n, starts[n-1].Format(time.RFC3339Nano), ends[0].Format(time.RFC3339Nano))
	}
	t.Logf("all %d updates in flight together: starts spread over %s, first end %s after the last start",
		n, starts[n-1].Sub(starts[0]), ends[0].Sub(starts[n-1]))
}

// TestFinishedUpdatesExpire: ttlAfterCompleted deletes a finished Update.
func TestFinishedUpdatesExpire(t *testing.T) {
	e := newEnv(t)
	startOperator(t, e.opts)
	repo := gitrepo.New(t)
	repo.Commit(t, "program", map[string]string{"Pulumi.yaml": recordProgram})
	ws := newWorkspace(e.ns, "ttl", repo.URL(), stackConfig("content", "c", "recordName", "ttl"))
	if err := cp.Client.Create(context.Background(), ws); err != nil {
		t.Fatal(err)
	}
	waitWorkspaceReady(t, ws, 2*time.Minute)
	u := newUpdate(e.ns, "short-lived", "ttl", autov1alpha1.PreviewType)
	u.Spec.TtlAfterCompleted = &metav1.Duration{Duration: 3 * time.Second}
	kept := newUpdate(e.ns, "default-ttl", "ttl", autov1alpha1.PreviewType)
	runUpdate(t, u, 2*time.Minute)
	runUpdate(t, kept, 2*time.Minute)
	eventually(t, time.Minute, "the expired update to be deleted", func() (bool, error) {
		err := get(t, u)
		return err != nil && strings.Contains(err.Error(), "not found"), err
	})
	if err := get(t, kept); err != nil {
		t.Fatalf("an update with the default 24h TTL was deleted: %v", err)
	}
}

// operatorProcess runs the operator binary against the control plane.
type operatorProcess struct {
	cmd *exec.Cmd
}

// startOperatorProcess runs the operator binary with the local runtime of e;
// extra flags are appended.
func startOperatorProcess(t testing.TB, e *env, kubeconfig string, extra ...string) *operatorProcess {
	t.Helper()
	var env []string
	for k, v := range e.opts.AgentEnv {
		env = append(env, k+"="+v)
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig, "--workspace-runtime=local", "--local-root=" + e.opts.LocalRoot,
		"--agent-binary=" + e.opts.AgentBinary, "--pulumi-root=" + e.opts.PulumiRoot,
		"--agent-env=" + strings.Join(env, ","), "--local-restart-backoff=1s",
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--artifact-addr=127.0.0.1:0"}, extra...)
	cmd := exec.Command(filepath.Join(bin, "operator"), args...)
	logf, err := os.OpenFile(filepath.Join(e.opts.LocalRoot, "operator.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &operatorProcess{cmd: cmd}
	t.Cleanup(p.kill)
	return p
}

// kill ends the operator abruptly, as a crash or OOM kill would.
func (p *operatorProcess) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
	}
}

func kubeconfig(t testing.TB) string {
	t.Helper()
	user, err := cp.Env.AddUser(envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func waitProgressing(t testing.TB, u *autov1alpha1.Update) {
	t.Helper()
	eventually(t, 2*time.Minute, u.Name+" progressing", func() (bool, error) {
		if err := get(t, u); err != nil {
			return false, err
		}
		return apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeProgressing), nil
	})
}

// TestOperatorCrashNeverLeavesUpdatesProgressing kills the operator process
// during a long up. Its restart re-attaches to the run the agent still has, and
// the update completes. Then both the operator and the agent are killed during
// a run: the restarted operator finds the run gone and marks the update Aborted,
// and the next up recovers the stale lock and converges the resources.
func TestOperatorCrashNeverLeavesUpdatesProgressing(t *testing.T) {
	e := newEnv(t)
	kc := kubeconfig(t)
	repo := gitrepo.New(t)
	repo.Commit(t, "program", map[string]string{"Pulumi.yaml": recordProgram})
	ctx := context.Background()

	op := startOperatorProcess(t, e, kc)
	ws := newWorkspace(e.ns, "crash", repo.URL(), stackConfig("content", "v1", "recordName", "crash", "sleep", 12))
	if err := cp.Client.Create(ctx, ws); err != nil {
		t.Fatal(err)
	}
	waitWorkspaceReady(t, ws, 2*time.Minute)

	// 1. Operator killed mid-run; the agent lives on; the restart re-attaches.
	long := newUpdate(e.ns, "long", "crash", autov1alpha1.UpType)
	if err := cp.Client.Create(ctx, long); err != nil {
		t.Fatal(err)
	}
	waitProgressing(t, long)
	op.kill()
	op = startOperatorProcess(t, e, kc)
	waitComplete(t, long, 3*time.Minute)
	if !succeeded(long) {
		t.Fatalf("re-attached update: %s %q", reason(long), long.Status.Message)
	}
	if got, _ := e.pe.Record(t, "crash"); got != "v1" {
		t.Fatalf("record = %q, want v1", got)
	}

	// 2. Operator and agent killed mid-run: the run is gone.
	mutate(t, ws, func() { ws.Spec.Stacks[0].Config = stackConfig("content", "v2", "recordName", "crash", "sleep", 12) })
	waitWorkspaceReady(t, ws, time.Minute)
	doomed := newUpdate(e.ns, "doomed", "crash", autov1alpha1.UpType)
	if err := cp.Client.Create(ctx, doomed); err != nil {
		t.Fatal(err)
	}
	waitProgressing(t, doomed)
	time.Sleep(3 * time.Second) // into the slow update step, holding the lock
	op.kill()
	pid := agentPID(t, e, "crash")
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill agent %d: %v", pid, err)
	}
	startOperatorProcess(t, e, kc)
	waitComplete(t, doomed, 3*time.Minute)
	if succeeded(doomed) || reason(doomed) != autov1alpha1.UpdateReasonAborted {
		t.Fatalf("update whose run died: %s %q, want Aborted", reason(doomed), doomed.Status.Message)
	}

	waitWorkspaceReady(t, ws, 2*time.Minute)
	if agentPID(t, e, "crash") == pid {
		t.Fatal("the dead agent was not replaced")
	}
	next := runUpdate(t, newUpdate(e.ns, "after-crash", "crash", autov1alpha1.UpType), 3*time.Minute)
	if !succeeded(next) {
		t.Fatalf("up after the crash: %s %q", reason(next), next.Status.Message)
	}
	if got, _ := e.pe.Record(t, "crash"); got != "v2" {
		t.Fatalf("record = %q, want v2 (resources match the program)", got)
	}
	t.Logf("recovery: %s", next.Status.Message)
}
