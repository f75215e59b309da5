//go:build deps

// Package deps pins, in the main module's go.mod, the libraries that components
// not yet written will use (Argo CD's Lua VM for argocd-health, Argo Rollouts'
// analysis types, go-github for the GitHub Action), so the whole dependency set is
// resolved, and compiled together by `make build` (go build -tags deps), from the
// start. Remove an import once a real package imports it (argocd-health now
// imports Argo CD's Lua VM and gitops-engine).
package deps

import (
	_ "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	_ "github.com/google/go-github/v60/github"
	_ "github.com/pulumi/pulumi/sdk/v3/go/auto"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
)
