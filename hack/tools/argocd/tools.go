//go:build tools

// Package argocd pins Argo CD's multi-call binary (it picks the component from
// ARGOCD_BINARY_NAME) that the Argo CD e2e and `make demo` run against the local
// control plane, built from the Go module proxy.
package argocd

import _ "github.com/argoproj/argo-cd/v2/cmd"
