// Package install tests the two ways Stackflow is installed: the Helm chart
// operator/charts/stackflow and the kustomize bases operator/config/default
// and analysis/config/default. The chart is rendered with the Helm SDK (by
// hack/tools/helm, a module of its own) and must ship what the kustomize
// bases ship; its manifests, for the default values and a values matrix, are
// applied server-side, dry-run and real, with strict field validation to a
// real API server (test/framework/substrate).
//
// It imports only the API machinery, kustomize and test/framework/substrate.
package install
