package rollouts

import "syscall"

// sysProcAttr makes the controller die with the process that started it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
