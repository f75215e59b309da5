// Package agent is the workspace agent: it runs inside a workspace (a pod, or a
// local process in development), fetches one Pulumi program (git, artifact or a
// local directory), and serves the operator an authenticated gRPC API that runs
// Pulumi operations through the Automation API — asynchronously, with a run
// registry keyed by update ID so a restarted operator can re-attach (bounded:
// finished runs are evicted after a retention period and beyond a cap, see
// RunRetention), event streaming, cancellation, and recovery of locks left by
// killed runs. What a program prints costs it bounded memory and every message
// it sends fits gRPC's limit (limits.go: one line splitter, output.go; a
// bounded capture of the CLI's output, command.go).
//
// It imports the generated agent API, the Pulumi Automation API, go-git,
// gitauth (credentials from the environment, or sent with a Checkout) and Kubernetes client libraries (for TokenReview authentication); never the
// operator's controllers.
package agent
