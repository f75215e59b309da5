package agent_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stackflow-io/stackflow/operator/internal/agent"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// cliUp starts `pulumi up` on the same stack and backend from the repository's
// working clone, in its own process group, returning the running command.
func cliUp(t *testing.T, pe *substrate.Pulumi, dir string, config ...string) *exec.Cmd {
	t.Helper()
	args := []string{"up", "--yes", "--skip-preview", "--non-interactive", "-s", "dev"}
	for _, c := range config {
		args = append(args, "-c", c)
	}
	cmd := exec.Command(filepath.Join(pe.Paths.PulumiRoot, "bin", "pulumi"), args...)
	cmd.Dir = dir
	cmd.Env = pe.Environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logf, err := os.Create(filepath.Join(t.TempDir(), "cli.log"))
	cliLogs = append(cliLogs, logf.Name())
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// cliLogs are the CLI runs' output files, for failure messages.
var cliLogs []string

// waitForLock waits until the backend holds a lock on the stack.
func waitForLock(t *testing.T, pe *substrate.Pulumi) {
	t.Helper()
	locks := filepath.Join(strings.TrimPrefix(pe.Backend, "file://"), ".pulumi", "locks")
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		found := false
		_ = filepath.Walk(locks, func(p string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() && strings.HasSuffix(p, ".json") {
				found = true
			}
			return nil
		})
		if found {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the CLI never locked the stack")
}

func setupStack(t *testing.T) (*substrate.Pulumi, *gitrepo.Repo, agentv1.AgentClient) {
	t.Helper()
	pe := substrate.NewPulumi(t)
	repo := gitrepo.New(t)
	repo.Commit(t, "program", map[string]string{"Pulumi.yaml": program, ".gitignore": "Pulumi.*.yaml\n"})
	c := dial(t, startAgent(t, pe, agent.Source{GitURL: repo.URL(), GitRef: "main"}), token)
	if _, err := c.SelectStack(context.Background(), &agentv1.SelectStackRequest{StackName: "dev", Create: true,
		Config: []*agentv1.ConfigItem{jsonItem("content", `"v1"`)}}); err != nil {
		t.Fatal(err)
	}
	start(t, c, "up-1", agentv1.OperationType_OPERATION_TYPE_UP)
	if res, _ := wait(t, c, "up-1"); res.State != agentv1.OperationState_OPERATION_STATE_SUCCEEDED {
		t.Fatalf("first up: %v %s", res.State, res.Message)
	}
	return pe, repo, c
}

// TestStaleLockFromKilledRunIsRecovered: a run killed mid-update leaves the
// stack locked with a pending operation; the next operation notices the holder
// is gone, removes the lock and the pending operation, says so, and succeeds.
func TestStaleLockFromKilledRunIsRecovered(t *testing.T) {
	pe, repo, c := setupStack(t)
	cmd := cliUp(t, pe, repo.Work, "content=v2", "sleep=120")
	waitForLock(t, pe)
	time.Sleep(3 * time.Second) // let the engine start the slow update step
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	start(t, c, "up-2", agentv1.OperationType_OPERATION_TYPE_UP)
	res, _ := wait(t, c, "up-2")
	if res.State != agentv1.OperationState_OPERATION_STATE_SUCCEEDED {
		t.Fatalf("up after a killed run = %v: %s", res.State, res.Message)
	}
	if len(res.Notices) == 0 || !strings.Contains(res.Notices[0], "removed a stale lock on stack dev left by a killed run") {
		t.Fatalf("notices = %q, want the stale-lock recovery reported", res.Notices)
	}
	if got, _ := pe.Record(t, "agent-record"); got != "v1" {
		t.Fatalf("record = %q, want the agent's configuration v1 applied", got)
	}
}

// TestLiveLockIsAConflict: a real concurrent update (a live process) is
// reported as a conflict and its lock is left alone.
func TestLiveLockIsAConflict(t *testing.T) {
	pe, repo, c := setupStack(t)
	cmd := cliUp(t, pe, repo.Work, "content=v3", "sleep=15")
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	waitForLock(t, pe)
	time.Sleep(2 * time.Second) // into the slow update step
	select {
	case err := <-exited:
		out, _ := os.ReadFile(cliLogs[len(cliLogs)-1])
		t.Fatalf("the concurrent pulumi up ended before the test could race it (%v):\n%s", err, out)
	default:
	}

	start(t, c, "up-2", agentv1.OperationType_OPERATION_TYPE_UP)
	res, _ := wait(t, c, "up-2")
	if res.State != agentv1.OperationState_OPERATION_STATE_CONFLICT || !strings.Contains(res.Message, "the stack is currently locked") {
		t.Fatalf("up during a live update = %v: %s", res.State, res.Message)
	}
	if len(res.Notices) != 0 {
		t.Fatalf("a live lock was treated as stale: %q", res.Notices)
	}
	if err := <-exited; err != nil {
		t.Fatalf("the live update failed after the conflict (its lock was broken?): %v", err)
	}
	if got, _ := pe.Record(t, "agent-record"); got != "v3" {
		t.Fatalf("record = %q, want the live update's v3", got)
	}
}
