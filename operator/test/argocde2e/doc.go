// Package argocde2e is the Argo CD end-to-end test: for each supported Argo CD
// version (test/framework/argocd starts the real application controller, repo
// server and API server with argocd-health's checks installed as shipped), the
// operator runs in this process and an Application syncs a Stack through
// progress, failure, fix, the reconcile-now action and deletion, its health
// as the Lua checks report it.
//
// It imports the operator API and assembly (operatortest), the local
// workspace runtime and the test framework (substrate, gitrepo, argocd).
package argocde2e
