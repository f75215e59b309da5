package cluster

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// checkScript is a copy of hack/substrate.sh that every user can read and run
// (the repository may be in a directory others cannot enter).
func checkScript(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(substrate.RepoRoot(), "hack", "substrate.sh"))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "cluster-check-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	script := filepath.Join(dir, "substrate.sh")
	if err := os.WriteFile(script, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

// clusterCheck runs `SCRIPT cluster-check`, prefixed by wrap (a command that
// runs it with less: another user, fewer capabilities, …), and returns its
// output and whether it passed.
func clusterCheck(t *testing.T, script string, wrap ...string) (string, bool) {
	t.Helper()
	args := append(append([]string{}, wrap...), script, "cluster-check")
	cmd := exec.Command(args[0], args[1:]...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	if stderr.Len() > 0 {
		t.Errorf("%s wrote to standard error: %s", strings.Join(args, " "), stderr.String())
	}
	return strings.TrimSpace(out.String()), err == nil
}

// TestClusterCheckSaysWhatIsMissing takes, one at a time, what the cluster
// needs away from a machine that has it all, and checks that make test's
// probe (hack/substrate.sh cluster-check) then fails and names that
// requirement: its output is the reason make test prints when it skips the
// cluster tests.
func TestClusterCheckSaysWhatIsMissing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to take requirements away one at a time")
	}
	script := checkScript(t)
	if out, ok := clusterCheck(t, script); !ok {
		t.Skipf("this machine cannot run the cluster (%s): each case would stop there", out)
	} else if out != "" {
		t.Errorf("cluster-check passed but printed %q, want nothing", out)
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv (util-linux)")
	}
	hybrid := "" // the memory controller's hierarchy on cgroup v1, else ""
	for _, h := range cgroupHierarchies() {
		if filepath.Base(h) == "memory" {
			hybrid = h
		}
	}
	cases := []struct {
		name string
		wrap []string
		want string
	}{
		{"not root", []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}, "not root ("},
		{"no CAP_SYS_ADMIN", []string{"setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin"},
			"cannot make a mount namespace (unshare --mount: Operation not permitted)"},
	}
	if hybrid != "" {
		cases = append(cases, struct {
			name string
			wrap []string
			want string
		}{"read-only memory cgroups", []string{"unshare", "--mount", "--propagation=private", "sh", "-c",
			`mount -o remount,ro,bind "$0" && exec "$@"`, hybrid}, hybrid + " is not writable (Read-only file system)"})
	} else {
		cases = append(cases, struct {
			name string
			wrap []string
			want string
		}{"read-only cgroups", []string{"unshare", "--mount", "--propagation=private", "sh", "-c",
			`mount -o remount,ro,bind /sys/fs/cgroup && exec "$@"`, "sh"}, "/sys/fs/cgroup is not writable (Read-only file system)"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, ok := clusterCheck(t, script, c.wrap...)
			if ok {
				t.Fatalf("cluster-check passed (%q), want it to fail with %q", out, c.want)
			}
			if !strings.HasPrefix(out, c.want) || strings.Contains(out, "\n") {
				t.Errorf("cluster-check said %q, want one line starting %q", out, c.want)
			}
		})
	}
}
