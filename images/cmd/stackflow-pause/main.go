// Command stackflow-pause is the kubelet's sandbox ("pause") container of the
// single-node test cluster (test/framework/cluster): it holds the pod's
// namespaces open by doing nothing until it is told to stop, and reaps any
// child re-parented to it. No registry is reachable from the test machine,
// so the upstream registry.k8s.io/pause image cannot be pulled; this one is
// built by images.Cluster and imported into containerd.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		// As PID 1 of a shared PID namespace, collect exited orphans.
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
