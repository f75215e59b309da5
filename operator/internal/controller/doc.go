// Package controller holds the operator's reconcilers, one per kind: Stack
// (derives a Workspace and runs Updates following package stack's decisions),
// Program (publishes each generation as an artifact), Workspace (runs the
// workspace agent through a runtime and applies stack configuration through
// it) and Update (starts an operation in a workspace and follows it without
// holding a worker).
//
// It imports the operator API, the agent API and client, the workspace
// runtimes, the artifact store, git credentials and resolution, the stack
// policies, internal/conditions (a condition read from another object counts
// only for the generation it observed) and controller-runtime.
package controller
