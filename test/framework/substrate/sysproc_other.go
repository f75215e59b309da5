//go:build !linux

package substrate

import "syscall"

// ChildProcAttr: only Linux has parent-death signals and mount namespaces;
// elsewhere a component may outlive a killed test, and Kargo's
// credential-helper must be installed at /usr/local/bin.
func ChildProcAttr(bool) *syscall.SysProcAttr { return nil }
