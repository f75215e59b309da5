// Package config holds Stackflow's Kargo manifests and their tests: the
// ClusterPromotionTasks in tasks/, the same as namespaced PromotionTasks in
// namespaced/ (kustomize), and example Stages in stages/.
//
// The tests read Kargo v1.11.2's CRDs and step config schemas from
// ../shared/kargo (a sibling of the repository root) and check every shipped
// object with a server-side dry run on envtest, every step config (after its
// expressions are evaluated by kargoexpr) against its step's JSON schema, and
// the http step's expressions against live answers of stackflow-analysis.
package config
