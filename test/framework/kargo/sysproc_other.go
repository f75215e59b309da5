//go:build !linux

package kargo

import "syscall"

// sysProcAttr: only Linux has mount namespaces and parent-death signals;
// elsewhere credential-helper must be installed at /usr/local/bin.
func sysProcAttr(bool) *syscall.SysProcAttr { return nil }
