//go:build tools

// Package kube pins the Kubernetes components that the tests run, built from the Go
// module proxy: kube-apiserver and etcd (the envtest control plane), and
// kube-controller-manager, kube-scheduler, kubelet and kube-proxy (the single-node cluster of
// test/framework/cluster). It lives in its own module because the main module's
// dependency set (argo-cd v2 needs filepath-securejoin v0.3.6) cannot build
// kube-apiserver.
package kube

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
