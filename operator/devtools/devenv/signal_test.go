package devenv

import (
	"encoding/json"
	"fmt"
	"github.com/stackflow-io/stackflow/test/framework/logbuf"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestSIGTERMStopsTheRun starts the dev environment the ways one does — the
// stackflow-dev binary, `make run`, a bare `go run` — waits until its control
// plane answers (and, with the sample, until the sample's agent runs), sends
// SIGTERM as a supervisor or `kill` would, and checks that the kube-apiserver,
// etcd and agent processes it started are gone, not orphaned.
func TestSIGTERMStopsTheRun(t *testing.T) {
	substrate.MustLocate(t)
	root := substrate.RepoRoot()
	devBin := filepath.Join(t.TempDir(), "stackflow-dev")
	build := exec.Command("go", "build", "-o", devBin, "./operator/devtools/cmd/stackflow-dev")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build stackflow-dev: %v\n%s", err, out)
	}
	tests := []struct {
		name string
		cmd  func(dir string) *exec.Cmd
		// sample runs the sample Stack, so an agent is running when the
		// signal arrives.
		sample bool
		// group sends the signal to the process group, as a terminal or
		// `kill -TERM -<pgid>` does; otherwise to the process alone.
		group bool
	}{
		{
			name:   "binary, with the sample's agent",
			cmd:    func(dir string) *exec.Cmd { return exec.Command(devBin, "--dir="+dir) },
			sample: true,
		},
		{
			// make passes SIGTERM on to the recipe's process only.
			name: "make run, its process",
			cmd: func(dir string) *exec.Cmd {
				return exec.Command("make", "-o", "substrate", "run", "RUN_ARGS=--no-sample --dir="+dir)
			},
		},
		{
			name: "make run, its process group",
			cmd: func(dir string) *exec.Cmd {
				return exec.Command("make", "-o", "substrate", "run", "RUN_ARGS=--no-sample --dir="+dir)
			},
			group: true,
		},
		{
			// go run dies of SIGTERM without passing it on.
			name: "go run, its process",
			cmd: func(dir string) *exec.Cmd {
				return exec.Command("go", "run", "./operator/devtools/cmd/stackflow-dev", "--no-sample", "--dir="+dir)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			cmd := tt.cmd(dir)
			cmd.Dir = root
			out := &logbuf.Buffer{}
			cmd.Stdout, cmd.Stderr = out, out
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { _ = cmd.Wait(); close(exited) }()
			pgid := cmd.Process.Pid
			t.Cleanup(func() {
				// Whatever the outcome, leave nothing running.
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				<-exited
			})

			waitControlPlane(t, dir, exited, out)
			started := descendants(cmd.Process.Pid)
			var watch []proc
			for _, name := range []string{"kube-apiserver", "etcd"} {
				p, ok := findProc(started, name)
				if !ok {
					t.Fatalf("no %s process under pid %d: %v\n%s", name, cmd.Process.Pid, started, out)
				}
				watch = append(watch, p)
			}
			if tt.sample {
				watch = append(watch, waitAgent(t, dir, exited, out))
			}
			if dev, ok := findProc(started, "stackflow-dev"); ok {
				watch = append(watch, dev)
			}
			t.Cleanup(func() {
				// envtest starts each control-plane process in its own
				// process group: a failed run leaves them to kill one by one.
				for _, p := range watch {
					if p.alive() {
						_ = syscall.Kill(p.pid, syscall.SIGKILL)
					}
				}
			})

			target := cmd.Process.Pid
			if tt.group {
				target = -pgid
			}
			if err := syscall.Kill(target, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(2 * time.Minute)
			for _, p := range watch {
				for p.alive() {
					if time.Now().After(deadline) {
						t.Fatalf("%s (pid %d) still runs 2m after SIGTERM\n%s", p.comm, p.pid, out)
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			select {
			case <-exited:
			case <-time.After(time.Until(deadline)):
				t.Fatalf("the process did not exit after SIGTERM\n%s", out)
			}
			t.Logf("stopped %d processes (%v)", len(watch), watch)
		})
	}
}

// waitControlPlane waits until the run's kubeconfig exists and its API server
// answers.
func waitControlPlane(t *testing.T, dir string, exited <-chan struct{}, out fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			t.Fatalf("the run exited before its control plane answered\n%s", out)
		default:
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
		if err == nil {
			var dc *discovery.DiscoveryClient
			if dc, err = discovery.NewDiscoveryClientForConfig(cfg); err == nil {
				if _, err = dc.ServerVersion(); err == nil {
					return
				}
			}
		}
		lastErr = err
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("the control plane did not answer in 5m (last error: %v)\n%s", lastErr, out)
}

// waitAgent waits until the local runtime has recorded a running agent.
func waitAgent(t *testing.T, dir string, exited <-chan struct{}, out fmt.Stringer) proc {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			t.Fatalf("the run exited before its agent started\n%s", out)
		default:
		}
		files, _ := filepath.Glob(filepath.Join(dir, "workspaces", "*", "*", "agent.json"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			var st struct{ PID int }
			if json.Unmarshal(b, &st) == nil && st.PID > 0 {
				if p, ok := readProc(st.PID); ok && p.alive() {
					return p
				}
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("no agent ran in 5m\n%s", out)
	return proc{}
}

// proc identifies a process: a pid and its start time, so a reused pid is not
// taken for it.
type proc struct {
	pid, ppid int
	comm      string
	start     string
}

func (p proc) String() string { return fmt.Sprintf("%s:%d", p.comm, p.pid) }

// alive reports whether the process still runs (a zombie does not).
func (p proc) alive() bool {
	cur, ok := readProc(p.pid)
	return ok && cur.start == p.start
}

// readProc parses /proc/<pid>/stat; zombies are reported as absent.
func readProc(pid int) (proc, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return proc{}, false
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return proc{}, false
	}
	// Fields after the command: state, ppid, ..., starttime (field 22 of
	// stat, the 20th here).
	f := strings.Fields(s[end+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return proc{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	return proc{pid: pid, ppid: ppid, comm: s[open+1 : end], start: f[19]}, true
}

// descendants lists the live processes under pid.
func descendants(pid int) []proc {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]proc{}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(n); ok {
			children[p.ppid] = append(children[p.ppid], p)
		}
	}
	var out []proc
	queue := []int{pid}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		for _, c := range children[next] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

func findProc(ps []proc, comm string) (proc, bool) {
	for _, p := range ps {
		if p.comm == comm {
			return p, true
		}
	}
	return proc{}, false
}
