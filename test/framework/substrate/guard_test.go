package substrate

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestControlPlaneDiesWithItsProcess starts a control plane in a child test
// process that then dies without stopping it, as a test binary does when its
// -timeout panics or it is killed, and checks that etcd and kube-apiserver
// end with it instead of running on, orphaned.
func TestControlPlaneDiesWithItsProcess(t *testing.T) {
	if os.Getenv("STACKFLOW_GUARD_CHILD") != "" {
		cp, err := StartControlPlane()
		if err != nil {
			t.Fatal(err)
		}
		for _, pid := range cp.guard.pids {
			// The parent reads these, then this process dies with them running.
			os.Stdout.WriteString("pid " + strconv.Itoa(pid) + "\n")
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	MustLocate(t)
	child := exec.Command(os.Args[0], "-test.run=^TestControlPlaneDiesWithItsProcess$", "-test.count=1")
	child.Env = append(os.Environ(), "STACKFLOW_GUARD_CHILD=1")
	var stderr strings.Builder
	child.Stderr = &stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "pid "); ok {
			pid, _ := strconv.Atoi(v)
			pids = append(pids, pid)
		}
	}
	if err := child.Wait(); err == nil {
		t.Fatal("the child process was to die of SIGKILL")
	}
	if len(pids) != 2 {
		t.Fatalf("the child reported %d control-plane processes, want etcd and kube-apiserver\n%s", len(pids), stderr.String())
	}
	Eventually(t, 30*time.Second, "etcd and kube-apiserver of a killed test process end", func() (bool, error) {
		for _, pid := range pids {
			// Signal 0 probes existence; a zombie is reaped by init quickly.
			if err := syscall.Kill(pid, 0); err == nil {
				if stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && !strings.Contains(string(stat), ") Z ") {
					return false, nil
				}
			}
		}
		return true, nil
	})
}
