//go:build unix

package gitcli

import (
	"os/exec"
	"syscall"
)

// killTree starts cmd in a process group of its own and, when its context
// ends, kills the whole group: git and the helpers it started.
func killTree(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
