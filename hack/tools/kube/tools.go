//go:build tools

// Package kube pins the Kubernetes control plane that the tests run: kube-apiserver
// and etcd, built from the Go module proxy. It lives in its own module because the
// main module's dependency set (argo-cd v2 needs filepath-securejoin v0.3.6) cannot
// build kube-apiserver.
package kube

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
