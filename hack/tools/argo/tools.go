//go:build tools

// Package argo pins the Argo Rollouts controller that the tests and `make demo`
// run, besides the Argo CD components of cmd/argocd, and Argo CD's whole
// multi-call binary (CLI included), so that `go build
// github.com/argoproj/argo-cd/v3/cmd` works here, e.g. to compare its build
// with the components' (hack/gen-tools-argo-kargo.sh says why they share a
// module).
package argo

import (
	_ "github.com/argoproj/argo-cd/v3/cmd"
	_ "github.com/argoproj/argo-rollouts/cmd/rollouts-controller"
)
