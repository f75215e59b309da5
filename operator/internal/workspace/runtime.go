// Package workspace holds how Workspaces are run: the Runtime interface, with
// the pod runtime (a StatefulSet and headless Service per Workspace, built by
// package pod) and the local runtime (package local: agent child processes, for
// development and tests on a machine with no kubelet).
//
// It imports the operator API, the pod builder and controller-runtime's client.
package workspace

import (
	"context"
	"time"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
)

// Status is what a runtime reports about a workspace's agent.
type Status struct {
	// Address is where the agent serves (host:port), once known.
	Address string
	// Ready: the agent has prepared the program and serves.
	Ready bool
	// Failed: the workspace cannot become ready until its spec, its source or
	// an object it refers to changes (the Workspace is Stalled); Message says
	// why. The runtime keeps retrying: a workspace that later becomes ready is
	// no longer Failed.
	Failed bool
	// Reason is a Workspace condition reason (autov1alpha1.WorkspaceReason*)
	// for a workspace that is not ready: empty while it starts normally
	// (Initializing), else why it fails — retrying while Failed is false.
	Reason string
	// Message describes the state for the Workspace's conditions. It never
	// holds a secret value: runtimes redact what they quote from logs.
	Message string
	// RecheckAfter, when positive, is when the state may change with no event
	// to signal it (a retrying failure reaching its threshold).
	RecheckAfter time.Duration
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

// ExitReporter is a runtime that can say why a workspace's agent last ended
// against its will: an Update whose run the agent no longer knows says so,
// instead of only that the workspace restarted.
type ExitReporter interface {
	// AgentExit describes the agent's last abnormal end at or after since
	// ("" when there was none, or the runtime cannot tell).
	AgentExit(ctx context.Context, ws *autov1alpha1.Workspace, since time.Time) (string, error)
}
