package agent_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stackflow-io/stackflow/operator/internal/agent"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// backendDir is the directory of pe's file:// backend.
func backendDir(pe *substrate.Pulumi) string { return strings.TrimPrefix(pe.Backend, "file://") }

// stackLockDir and stackFile are where the file:// backend keeps a stack's
// locks and its checkpoint (project-scoped stacks of the organization
// "organization").
func stackLockDir(pe *substrate.Pulumi, stack string) string {
	return filepath.Join(backendDir(pe), ".pulumi", "locks", "organization", "agenttest", stack)
}

func stackFile(pe *substrate.Pulumi, stack string) string {
	return filepath.Join(backendDir(pe), ".pulumi", "stacks", "agenttest", stack+".json")
}

// lockFiles are the stack's locks (but the FIFO of stopStackInitAtLock).
func lockFiles(t *testing.T, pe *substrate.Pulumi, stack string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(stackLockDir(pe, stack), "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var locks []string
	for _, f := range files {
		if filepath.Base(f) != fifoLock {
			locks = append(locks, f)
		}
	}
	return locks
}

// killStackInitHoldingLock runs the real `pulumi stack init <stack>` and kills
// it at the point an interrupted creation can stop: after it wrote the stack's
// lock and before it wrote the stack. It returns the name of the stack left
// locked and missing. An attempt that misses the point (see
// stopStackInitAtLock) is made again under another stack name.
func killStackInitHoldingLock(t *testing.T, pe *substrate.Pulumi, dir string) string {
	t.Helper()
	for attempt := range 10 {
		stack := "dev" + string(rune('a'+attempt))
		if stopStackInitAtLock(t, pe, dir, stack) {
			return stack
		}
		t.Logf("attempt %d: the init of %s got past its lock before it could be held; again", attempt, stack)
	}
	t.Fatal("could not hold pulumi stack init between its lock and its stack in 10 attempts")
	return ""
}

// stopStackInitAtLock is one attempt of killStackInitHoldingLock. The DIY
// backend writes the stack's lock, lists the lock directory again and reads
// every other lock in it, then writes the stack. The moment the CLI starts
// writing its lock (inotify on the lock directory), a FIFO is placed there as
// another lock: its second listing finds it and blocks reading it. Once the
// CLI is seen blocked (a writer can open the FIFO only while a reader has
// it), it is killed. True when it was killed holding the lock of a stack it
// had not created; false when it got past its second listing first (the CLI
// runs at the lowest CPU priority, so on a busy machine it rarely does).
func stopStackInitAtLock(t *testing.T, pe *substrate.Pulumi, dir, stack string) bool {
	t.Helper()
	lockDir := stackLockDir(pe, stack)
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, lockDir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nice", "-n", "19", filepath.Join(pe.Paths.PulumiRoot, "bin", "pulumi"), "stack", "init", stack, "--non-interactive")
	cmd.Dir = dir
	cmd.Env = pe.Environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	kill := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	defer kill()
	fifo := filepath.Join(lockDir, fifoLock)
	defer os.Remove(fifo)

	// The CLI starts writing its lock.
	buf := make([]byte, 4096)
	for seen := false; !seen; {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(pfd, 100); n > 0 {
			n, _ := unix.Read(fd, buf)
			seen = n > 0
		}
		select {
		case err := <-exited:
			t.Fatalf("pulumi stack init %s exited (%v) before it locked the stack", stack, err)
		default:
		}
	}
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// The CLI blocks reading the FIFO, or gets past.
	var w *os.File
	passed := false
	substrate.Eventually(t, 2*time.Minute, "pulumi stack init to read the FIFO lock or to exit", func() (bool, error) {
		select {
		case <-exited:
			passed = true
			return true, nil
		default:
		}
		f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		w = f
		return err == nil, err
	})
	if passed {
		return false
	}
	defer w.Close()
	_, statErr := os.Stat(stackFile(pe, stack))
	kill()
	<-exited
	return errors.Is(statErr, os.ErrNotExist) && len(lockFiles(t, pe, stack)) > 0
}

// fifoLock is the name of the FIFO stopStackInitAtLock places among a
// stack's locks.
const fifoLock = "00000000-0000-0000-0000-fifo.json"

// TestCreateAfterStackInitKilledHalfWay: a `pulumi stack init` killed after
// it locked the stack and before it created it (the agent killed, or the
// operator's call cancelled and the CLI killed after its grace period, on a
// loaded machine) leaves the lock and no stack. The agent's next creation of
// that stack removes the stale lock, says nothing went wrong, and the stack
// exists afterwards; no lock is left.
func TestCreateAfterStackInitKilledHalfWay(t *testing.T) {
	pe := substrate.NewPulumi(t)
	repo := gitrepo.New(t)
	repo.Commit(t, "program", map[string]string{"Pulumi.yaml": program, ".gitignore": "Pulumi.*.yaml\n"})
	stack := killStackInitHoldingLock(t, pe, repo.Work)

	c := dial(t, startAgent(t, pe, agent.Source{GitURL: repo.URL(), GitRef: "main"}), token)
	ctx := context.Background()
	if _, err := c.SelectStack(ctx, &agentv1.SelectStackRequest{StackName: stack, Create: true,
		Config: []*agentv1.ConfigItem{jsonItem("content", `"v1"`)}}); err != nil {
		t.Fatalf("create %s after a killed stack init: %v", stack, err)
	}
	if _, err := os.Stat(stackFile(pe, stack)); err != nil {
		t.Fatalf("the stack was not created: %v", err)
	}
	if left := lockFiles(t, pe, stack); len(left) > 0 {
		t.Fatalf("locks left: %v", left)
	}
}

// TestSelectFailureCarriesTheCLIError: a creation failing on a lock that is
// not stale (another host's) is not broken into, and the error carries the
// CLI's own message — which lock, held by whom — never just "exit status 1".
func TestSelectFailureCarriesTheCLIError(t *testing.T) {
	pe := substrate.NewPulumi(t)
	repo := gitrepo.New(t)
	repo.Commit(t, "program", map[string]string{"Pulumi.yaml": program})
	c := dial(t, startAgent(t, pe, agent.Source{GitURL: repo.URL(), GitRef: "main"}), token)
	// A lock held by a live process of another host: never removed.
	if err := os.MkdirAll(stackLockDir(pe, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(stackLockDir(pe, "dev"), "0b7c2d5e-live.json")
	if err := os.WriteFile(lock, []byte(`{"pid":1,"username":"ci","hostname":"elsewhere","timestamp":"2026-01-01T00:00:00Z"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := c.SelectStack(context.Background(), &agentv1.SelectStackRequest{StackName: "dev", Create: true,
		Config: []*agentv1.ConfigItem{jsonItem("content", `"v1"`)}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("select under another host's lock = %v, want Unavailable", err)
	}
	msg := status.Convert(err).Message()
	for _, want := range []string{"select stack dev: could not create stack: the stack is currently locked by 1 lock(s)", "created by ci@elsewhere (pid 1)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "exit status") {
		t.Errorf("message %q is the exit status, not the CLI's error", msg)
	}
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("another host's lock was removed: %v", err)
	}
}

// TestSelectionOutlivesItsCaller: the operator's call going away (the
// operator killed mid-call) does not interrupt the selection: it completes
// by itself — the configuration lands in the stack without another call —
// and the same request afterwards is answered at once.
func TestSelectionOutlivesItsCaller(t *testing.T) {
	pe := substrate.NewPulumi(t)
	repo := gitrepo.New(t)
	repo.Commit(t, "program", map[string]string{"Pulumi.yaml": program})
	c := dial(t, startAgent(t, pe, agent.Source{GitURL: repo.URL(), GitRef: "main"}), token)
	info, err := c.Info(context.Background(), &agentv1.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	req := &agentv1.SelectStackRequest{StackName: "dev", Create: true, Config: []*agentv1.ConfigItem{jsonItem("content", `"outlived"`)}}
	// Cancelled as soon as the CLI locks the stack to create it.
	if err := os.MkdirAll(stackLockDir(pe, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, stackLockDir(pe, "dev"), unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		buf := make([]byte, 4096)
		_, _ = unix.Read(fd, buf)
		cancel()
	}()
	if _, err := c.SelectStack(ctx, req); status.Code(err) != codes.Canceled {
		t.Fatalf("the cancelled call = %v, want Canceled", err)
	}
	// The configuration arrives without another call.
	cfgFile := filepath.Join(info.WorkDir, "Pulumi.dev.yaml")
	substrate.Eventually(t, 2*time.Minute, "the selection to apply the configuration by itself", func() (bool, error) {
		b, err := os.ReadFile(cfgFile)
		return err == nil && strings.Contains(string(b), "outlived"), nil
	})
	quick, cancelQuick := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelQuick()
	if _, err := c.SelectStack(quick, req); err != nil {
		t.Fatalf("the same request after the selection ended: %v", err)
	}
	if left := lockFiles(t, pe, "dev"); len(left) > 0 {
		t.Fatalf("locks left: %v", left)
	}
}

// TestConcurrentSelectionsOfAStack: two callers selecting the same new stack
// at once (a restarted operator asking again while the first call's pulumi
// still runs) get one creation between them, and all succeed; another
// configuration afterwards is applied.
func TestConcurrentSelectionsOfAStack(t *testing.T) {
	pe := substrate.NewPulumi(t)
	repo := gitrepo.New(t)
	repo.Commit(t, "program", map[string]string{"Pulumi.yaml": program})
	c := dial(t, startAgent(t, pe, agent.Source{GitURL: repo.URL(), GitRef: "main"}), token)
	info, err := c.Info(context.Background(), &agentv1.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	reqs := []*agentv1.SelectStackRequest{
		{StackName: "dev", Create: true, Config: []*agentv1.ConfigItem{jsonItem("content", `"first"`)}},
		{StackName: "dev", Create: true, Config: []*agentv1.ConfigItem{jsonItem("content", `"first"`)}},
		{StackName: "dev", Create: true, Config: []*agentv1.ConfigItem{jsonItem("content", `"first"`)}},
	}
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = c.SelectStack(context.Background(), r)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent selection %d: %v", i, err)
		}
	}
	second := &agentv1.SelectStackRequest{StackName: "dev", Create: true, Config: []*agentv1.ConfigItem{jsonItem("content", `"second"`)}}
	if _, err := c.SelectStack(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(info.WorkDir, "Pulumi.dev.yaml"))
	if err != nil || !strings.Contains(string(b), "second") {
		t.Fatalf("stack configuration = %q (%v), want the last one applied", b, err)
	}
}
