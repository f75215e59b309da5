// Package argocdhealth holds the Argo CD health checks (Lua) for Stack,
// Program, Workspace and Update, and the resource actions for Stack, and
// renders them as argocd-cm entries (a kustomize Component and Helm values for
// the argo-cd chart, generated into install/ by cmd/gen).
//
// The .lua files under resource_customizations/ are the source of truth, laid
// out as in Argo CD's own resource_customizations directory
// (<group>/<Kind>/health.lua, <group>/<Kind>/actions/discovery.lua,
// <group>/<Kind>/actions/<action>/action.lua) and embedded here. README.md
// gives the status each script reports and why.
//
// It may import Argo CD's application types and Lua VM (util/lua) and
// gitops-engine's health package, so that Go code evaluates the scripts exactly
// as Argo CD does; it does not import the operator.
package argocdhealth

//go:generate go run ./cmd/gen -dir install
