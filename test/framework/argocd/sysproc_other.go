//go:build !linux

package argocd

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
