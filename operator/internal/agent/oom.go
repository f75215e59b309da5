package agent

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The memory cgroup files of the agent's container, read to tell an operation
// killed by the kernel's OOM killer from any other failure: the Automation
// API only sees its pulumi child die of SIGKILL ("signal: killed"), and the
// container itself goes on running, so the kubelet reports nothing.
// cgroup v2 first (memory.events), then v1 (memory.oom_control, whose
// oom_kill counter kernels have had since 4.13).
var (
	oomEventFiles = []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"}
	memLimitFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}
)

// oomKills is the number of processes the OOM killer has killed in the
// agent's memory cgroup; ok is false where it cannot be read.
func oomKills() (n uint64, ok bool) {
	for _, f := range oomEventFiles {
		file, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), " ")
			if k == "oom_kill" {
				n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				file.Close()
				return n, err == nil
			}
		}
		file.Close()
	}
	return 0, false
}

// memoryLimit describes the cgroup's memory limit, "" when there is none.
func memoryLimit() string {
	for _, f := range memLimitFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n >= 1<<62 { // "max", or v1's "unlimited" page-rounded maximum
			return ""
		}
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return ""
}

// oomMessage prefixes a failed operation's message when the OOM killer
// killed a process of the container since before (the count when the
// operation started).
func oomMessage(before uint64, beforeOK bool, msg string) string {
	after, ok := oomKills()
	if !ok || !beforeOK || after <= before {
		return msg
	}
	limit := memoryLimit()
	if limit != "" {
		limit = " of " + limit
	}
	return fmt.Sprintf("OOMKilled: a process of the operation was killed for exceeding the workspace container's memory limit%s (raise workspaceTemplate.spec.resources.limits.memory): %s", limit, msg)
}
