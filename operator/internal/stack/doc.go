// Package stack holds what the Stack controller decides and derives, as pure
// functions: whether a Stack should run an update now and why (policy.go, with
// an injected clock), and the Workspace and Update a Stack turns into
// (derive.go).
//
// It imports the operator API, Kubernetes API machinery and gitauth (the
// mapping of spec.gitAuth) only; it reads no cluster state.
package stack
