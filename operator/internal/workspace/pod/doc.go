// Package pod builds the Kubernetes objects of the pod workspace runtime: for a
// Workspace, a one-replica StatefulSet running the workspace agent in the
// Pulumi image, and the headless Service that gives the agent's pod a stable
// DNS name (Address).
//
// Everything here is a pure function of the Workspace and Options: no client,
// no clock, no randomness, so the controller converges by comparing SpecHash of
// what Build returns with the hash annotation on what is in the cluster (never
// with the live pod template, which the API server defaults).
//
// Classify (health.go) reads a workspace pod's status the same way — a pure
// function of the pod, the wanted spec hash and a clock given by the caller —
// to say whether the workspace is starting, ready, failing while Kubernetes
// retries, or failed.
//
// The agent binary is copied out of the operator image by an init container
// into an emptyDir shared with the Pulumi container, so any Pulumi image can be
// used as is. spec.stacks is not part of the pod: stack configuration reaches
// the agent over its RPC API, so a configuration change never restarts the
// workspace.
//
// It imports the operator API (auto/v1alpha1), k8s.io/api and
// k8s.io/apimachinery only: no controller-runtime, no client-go.
package pod
