package agent

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The memory cgroup files of the agent's container, read to tell an operation
// killed by the kernel's OOM killer from any other failure: the Automation
// API only sees its pulumi child die of SIGKILL ("signal: killed"), and the
// container itself goes on running, so the kubelet reports nothing.
// cgroup v2 (memory.events) or v1 (memory.oom_control, whose oom_kill
// counter kernels have had since 4.13), in the agent's own cgroup as
// /proc/self/cgroup names it, or at the hierarchy's root as a container
// sees its own cgroup there.
var (
	cgroupRoot     = "/sys/fs/cgroup"
	selfCgroupFile = "/proc/self/cgroup"
)

// memoryCgroupFiles are the candidate paths of a memory cgroup file: v2's
// name (v2File) and v1's (v1File, under the memory controller).
func memoryCgroupFiles(v2File, v1File string) []string {
	var v2Path, v1Path string
	if b, err := os.ReadFile(selfCgroupFile); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				continue
			}
			switch {
			case parts[0] == "0" && parts[1] == "":
				v2Path = parts[2]
			case slicesContains(strings.Split(parts[1], ","), "memory"):
				v1Path = parts[2]
			}
		}
	}
	var out []string
	if v1Path != "" {
		out = append(out, filepath.Join(cgroupRoot, "memory", v1Path, v1File))
	}
	out = append(out, filepath.Join(cgroupRoot, "memory", v1File))
	if v2Path != "" {
		out = append(out, filepath.Join(cgroupRoot, v2Path, v2File))
	}
	return append(out, filepath.Join(cgroupRoot, v2File))
}

func slicesContains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// oomKills is the number of processes the OOM killer has killed in the
// agent's memory cgroup; ok is false where it cannot be read.
func oomKills() (n uint64, ok bool) {
	for _, f := range memoryCgroupFiles("memory.events", "memory.oom_control") {
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
	for _, f := range memoryCgroupFiles("memory.max", "memory.limit_in_bytes") {
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
// killed a process of the agent's memory cgroup since before (the count when
// the operation started) and the cgroup has a limit: without one, the
// cgroup may be the host's root, whose count is every process's.
func oomMessage(before uint64, beforeOK bool, msg string) string {
	after, ok := oomKills()
	if !ok || !beforeOK || after <= before {
		return msg
	}
	limit := memoryLimit()
	if limit == "" {
		return msg
	}
	return fmt.Sprintf("OOMKilled: a process of the operation was killed for exceeding the workspace container's memory limit of %s (raise workspaceTemplate.spec.resources.limits.memory): %s", limit, msg)
}
