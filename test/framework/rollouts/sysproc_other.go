//go:build !linux

package rollouts

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
