// Package workspace holds how Workspaces are run: the Runtime interface, with
// the pod runtime (a StatefulSet and headless Service per Workspace, built by
// package pod) and the local runtime (package local: agent child processes, for
// development and tests on a machine with no kubelet).
//
// It imports the operator API, the pod builder and controller-runtime's client.
package workspace

import (
	"context"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
)

// Status is what a runtime reports about a workspace's agent.
type Status struct {
	// Address is where the agent serves (host:port), once known.
	Address string
	// Ready: the agent has prepared the program and serves.
	Ready bool
	// Failed: the agent could not prepare the program (fetch or install
	// failed); Message says why.
	Failed bool
	// Message describes the state for the Workspace's conditions.
	Message string
}

// Runtime runs workspace agents.
type Runtime interface {
	// Ensure makes the workspace's agent exist for the workspace's current
	// spec, replacing it when its source, image or pod shape changed (never for
	// a change of spec.stacks alone), and reports its state. token is the
	// bearer token the agent must require.
	Ensure(ctx context.Context, ws *autov1alpha1.Workspace, token string) (Status, error)
	// Remove stops the workspace's agent and deletes what the runtime made.
	Remove(ctx context.Context, ws *autov1alpha1.Workspace) error
}
