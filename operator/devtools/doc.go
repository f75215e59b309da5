// Package devtools holds the developer tools, apart from the product: nothing
// here is linked into the operator, the agent or any image, and no product
// package imports it.
//
//   - devenv: `make run` (cmd/stackflow-dev): a control plane, the operator
//     with the local workspace runtime, a file backend and a sample Stack.
//   - demo: `make demo` (cmd/stackflow-demo): a release rolled out dev → test
//     → prod with the real operator, analysis service, Argo CD, Argo Rollouts
//     and Kargo, offline.
//   - cmd/stackflow-cluster: `make cluster`, the single-node test cluster of
//     test/framework/cluster, kept until Ctrl-C.
//
// They start what the test framework (test/framework: substrate, gitrepo,
// provider, argocd, rollouts, kargo, cluster, …) starts for the suites, and
// the operator in-process (operator/internal/operator/operatortest). The
// tree is under operator/ rather than the repository root because Go lets
// only code under operator/ import operator/internal (the operator's
// assembly and its local workspace runtime), and outside operator/internal
// so that the product's packages stay those that ship.
package devtools
