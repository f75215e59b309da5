// Package cli holds the stackflow-kargo command line: its subcommands
// set-commit, wait and lint, their flags and help, exit codes, and the step
// output written to $KARGO_OUTPUT (the Akuity Platform's CustomPromotionStep
// contract). cmd/stackflow-kargo calls Main.
//
// It imports kargo-steps/manifest (the editor), kargo-steps/waiter (the
// verification client) and the analysis service's schema.
package cli
