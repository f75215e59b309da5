// Package stack holds what the Stack controller decides and derives, as pure
// functions: whether a Stack should run an update now and why (policy.go, with
// an injected clock), the Workspace and Update a Stack turns into
// (derive.go), and the one walk of everything a Stack's spec refers to
// (refs.go: Refs), from which the cross-namespace refusal, the mapping of
// spec.gitAuth, the inputs read and the controller's watches all derive.
//
// It imports the operator API, Kubernetes API machinery and gitauth (the
// check of a GitHub App's API URL) only; it reads no cluster state.
package stack
