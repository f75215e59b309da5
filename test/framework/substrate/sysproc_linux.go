package substrate

import "syscall"

// ChildProcAttr makes a component a test or a developer tool starts (Argo
// CD, Kargo, Argo Rollouts) die with the process that started it, so that a
// test binary or the demo killed with SIGKILL leaves none behind; with
// mountNS, it runs in a mount namespace of its own (Go makes it private, so
// its mounts stay in it).
func ChildProcAttr(mountNS bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if mountNS {
		a.Unshareflags = syscall.CLONE_NEWNS
	}
	return a
}
