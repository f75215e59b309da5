package substrate

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// guard makes sure that the processes this process started from the given
// binaries (etcd and kube-apiserver, which envtest starts in process groups of
// their own) do not outlive it, however it ends: a test binary killed by its
// -timeout panic, by os.Exit in a failing TestMain, or by SIGKILL runs no
// deferred Stop, and envtest sets no parent-death signal. A small shell
// process waits on a pipe whose only writer is this process; when this
// process dies, the kernel closes it, the read returns and the shell kills the
// groups. A normal Stop kills the guard first (stop), so it never acts on
// process IDs that are no longer the control plane's.
type guard struct {
	cmd  *exec.Cmd
	w    *os.File
	pids []int
}

// startGuard starts the guard over pids, each the leader of its process group.
func startGuard(pids []int) (*guard, error) {
	targets := make([]string, len(pids))
	for i, pid := range pids {
		targets[i] = "-" + strconv.Itoa(pid) // the process group envtest made for it
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	args := append([]string{"-c", `read _ || true; kill -KILL -- "$@" 2>/dev/null`, "guard"}, targets...)
	cmd := exec.Command("/bin/bash", args...) // dash's kill takes no "--" before a process group
	cmd.Stdin = r
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	r.Close()
	return &guard{cmd: cmd, w: w, pids: pids}, nil
}

// stop ends the guard without letting it act.
func (g *guard) stop() {
	if g == nil {
		return
	}
	if g.cmd == nil {
		return
	}
	_ = g.cmd.Process.Kill()
	_ = g.cmd.Wait()
	_ = g.w.Close()
}

// newChildren runs start and returns the children of this process running one
// of binaries that were not there before: the processes start started.
func newChildren(binaries []string, start func() error) ([]int, error) {
	before, err := childrenRunning(binaries)
	if err != nil {
		return nil, err
	}
	if err := start(); err != nil {
		return nil, err
	}
	after, err := childrenRunning(binaries)
	if err != nil {
		return nil, err
	}
	var started []int
	for _, pid := range after {
		if !slices.Contains(before, pid) {
			started = append(started, pid)
		}
	}
	if len(started) != len(binaries) {
		return started, fmt.Errorf("found %d new processes of %s, want %d", len(started), strings.Join(binaries, ", "), len(binaries))
	}
	return started, nil
}

// childrenRunning lists the processes whose parent is this process and whose
// executable is one of binaries (symbolic links resolved), read from /proc.
func childrenRunning(binaries []string) ([]int, error) {
	want := map[string]bool{}
	for _, b := range binaries {
		p, err := filepath.EvalSymlinks(b)
		if err != nil {
			return nil, err
		}
		want[p] = true
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := strconv.Itoa(os.Getpid())
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The fields after the command's closing parenthesis: state, ppid, …
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) < 2 || fields[1] != self {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && want[exe] {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
