// Package examples holds no code: it is the home of the tests of the example
// pipelines in argocd/ (an Argo CD AppProject, one Application per
// environment, sync-waved environments of Stacks, a PR preview
// ApplicationSet) and kargo/ (the Kargo project kargo-demo promoting those
// Stacks with Stackflow's ClusterPromotionTasks and verifying them with
// stackflow-analysis' templates).
//
// The tests check what a user applying the examples would otherwise find out
// on a live cluster:
//   - every YAML object under examples/ (multi-document files split,
//     kustomizations rendered with kustomize's krusty) is accepted by a real
//     kube-apiserver with the CRDs of Stackflow, Argo CD v2.14.21, Argo
//     Rollouts v1.10.1 and Kargo v1.11.2 installed, as a server-side dry run
//     with strict field validation; so is the Application the PR preview
//     ApplicationSet renders (with Argo CD's own template renderer) and the
//     kustomize build Argo CD runs for it;
//   - the Kargo Stages reference Stackflow's shipped ClusterPromotionTasks
//     (kargo-steps/config/tasks) and pass only vars the task knows; the
//     Warehouse subscribes to the Stages' repoURL;
//   - drift between the pieces: sync-wave order, Application paths,
//     AppProject whitelists and destinations (with Argo CD's own checks),
//     finalizers and sync options, Kargo's authorized-stage annotations,
//     that the argocd-health install (kustomize Component and Helm values)
//     has a health check for every Stackflow kind the Applications sync and
//     the Stack actions the README describes, that the READMEs name every
//     file and the install paths they give exist.
//
// What the controllers do with these objects is shown elsewhere, by the real
// ones: operator/test/kargoe2e promotes examples/kargo with Kargo, Argo CD
// and Argo Rollouts; operator/test/argocde2e and the demo sync with Argo CD.
// Inputs outside the repository: the substrate (./hack/substrate.sh env:
// KUBEBUILDER_ASSETS, STACKFLOW_ARGOCD, STACKFLOW_ROLLOUTS) and Kargo's
// reference data in ../shared/kargo, beside the repository root
// ($STACKFLOW_KARGO_SRC/.. when set).
//
// The package may import the repository's test substrate and
// analysis/config, and Argo CD's and Argo Rollouts' Go modules.
package examples
