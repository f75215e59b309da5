package kargo

import "syscall"

// sysProcAttr makes a component die with the process that started it (a
// test binary or the demo killed with SIGKILL leaves no Kargo behind); with
// mountNS, in a mount namespace of its own (Go makes it private, so its
// mounts stay in it).
func sysProcAttr(mountNS bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if mountNS {
		a.Unshareflags = syscall.CLONE_NEWNS
	}
	return a
}
