// Package e2e runs the operator end to end on a real control plane with the
// local workspace runtime: real agent processes, the real pulumi engine with
// the test provider on a file:// backend, real git repositories.
package e2e
