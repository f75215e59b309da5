// Package kargoe2e runs Kargo itself (test/framework/kargo: its controller,
// Kubernetes webhooks server and management controller, built from the shared
// Kargo source) with the real Argo CD, Argo Rollouts' analysis controller, the
// operator and the analysis service, on one local control plane: the shipped
// promotion tasks, analysis templates and examples/kargo promote commits of a
// program repository served over loopback git, end to end. Without
// ../shared/kargo/src its tests skip with the reason.
package kargoe2e
