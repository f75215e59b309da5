//go:build !unix

package gitcli

import "os/exec"

// killTree: elsewhere only git itself is killed when its context ends (the
// default); its output is abandoned after WaitDelay all the same.
func killTree(*exec.Cmd) {}
