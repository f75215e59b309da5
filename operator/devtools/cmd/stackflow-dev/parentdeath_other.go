//go:build !linux

package main

// stopWithParent is Linux-only (prctl PR_SET_PDEATHSIG); elsewhere the run
// stops on SIGINT and SIGTERM only.
func stopWithParent() {}
