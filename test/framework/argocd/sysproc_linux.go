package argocd

import "syscall"

// sysProcAttr makes a component die with the process that started it (a
// test binary or the demo killed with SIGKILL leaves no Argo CD behind).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
