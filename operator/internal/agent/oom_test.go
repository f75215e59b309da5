package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOOMMessage(t *testing.T) {
	for _, c := range []struct {
		name, self, events, limit string
	}{
		// A container's cgroup v2 namespace: its cgroup is the root.
		{"v2", "0::/\n", "memory.events", "memory.max"},
		// cgroup v1 on a host: the agent's own cgroup under the memory controller.
		{"v1", "5:memory:/kubepods/pod1/ctr\n4:cpu,cpuacct:/x\n", "memory/kubepods/pod1/ctr/memory.oom_control", "memory/kubepods/pod1/ctr/memory.limit_in_bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			oldRoot, oldSelf := cgroupRoot, selfCgroupFile
			t.Cleanup(func() { cgroupRoot, selfCgroupFile = oldRoot, oldSelf })
			cgroupRoot, selfCgroupFile = dir, filepath.Join(dir, "self")
			write := func(f, s string) {
				t.Helper()
				if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			events, limit := filepath.Join(dir, c.events), filepath.Join(dir, c.limit)
			write(selfCgroupFile, c.self)
			write(events, "oom 1\noom_kill 1\n")
			write(limit, "67108864\n")
			before, ok := oomKills()
			if !ok || before != 1 {
				t.Fatalf("oomKills = %d, %v", before, ok)
			}
			if got := oomMessage(before, ok, "signal: killed"); got != "signal: killed" {
				t.Fatalf("no new kill: %q", got)
			}
			write(events, "oom 2\noom_kill 2\n")
			got := oomMessage(before, ok, "signal: killed")
			if !strings.HasPrefix(got, "OOMKilled: ") || !strings.Contains(got, "of 64 MiB") || !strings.HasSuffix(got, ": signal: killed") {
				t.Fatalf("after a kill: %q", got)
			}
			// No limit: the count may be the whole machine's; no claim.
			write(limit, "max\n")
			if got := oomMessage(before, ok, "x"); got != "x" {
				t.Fatalf("no limit: %q", got)
			}
			os.Remove(events)
			if got := oomMessage(before, ok, "x"); got != "x" {
				t.Fatalf("unreadable: %q", got)
			}
		})
	}
}
