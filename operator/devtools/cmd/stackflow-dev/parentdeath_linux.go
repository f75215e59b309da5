package main

import (
	"os"
	"syscall"
)

// stopWithParent asks the kernel to send this process SIGTERM when its parent
// dies. `go run` ignores SIGINT (the terminal sends it to the whole process
// group, this process included) but dies of SIGTERM without passing it on, and
// a parent killed with SIGKILL passes nothing on either: without this, the
// orphaned run would keep its kube-apiserver, etcd and agents running. The
// SIGTERM then stops them as Ctrl-C does.
func stopWithParent() {
	parent := os.Getppid()
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
		return // best effort: signals still stop the run
	}
	if os.Getppid() != parent {
		// The parent died before the request took effect.
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}
}
