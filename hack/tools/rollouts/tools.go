//go:build tools

// Package rollouts pins the Argo Rollouts controller that the analysis e2e runs
// against the local control plane, built from the Go module proxy.
package rollouts

import _ "github.com/argoproj/argo-rollouts/cmd/rollouts-controller"
