// Package verification tests the analysis service end to end with the real
// parts around it: the operator (in this process, local workspace runtime,
// the real pulumi engine) drives Stacks from a git repository on disk, the
// analysis service answers from its informer cache with Kubernetes
// authentication, and the real Argo Rollouts controller (built by `make
// substrate`) runs AnalysisRuns made from the shipped templates
// (analysis/config/templates) against it. Argo Rollouts' own web metric
// provider also runs the templates' metrics in this process for every phase.
//
// It also runs a Kargo-style promotion with the real stackflow-kargo binary:
// set-commit in a clone of a manifests repository, commit and push, a sync
// of the pushed manifests standing in for Argo CD, and wait against the
// analysis service.
//
// It lives under operator/ because it starts the operator in-process.
package verification
