// Package tokensecret fills a Secret with a ServiceAccount token minted for
// an audience (the TokenRequest API, which also backs projected token
// volumes), for callers that can only read a token from a Secret: Argo
// Rollouts' web metrics (the analysis templates' token arg) and Kargo's http
// step (its secret() function). A kubernetes.io/service-account-token Secret
// cannot serve them: its token carries no audience, so the API server
// validates it for its own audiences only, and stackflow-analysis refuses it.
//
// The minted token expires and is bound to the Secret (deleting the Secret
// revokes it), so something must mint it again before it expires:
// `stackflow-analysis refresh-token` run by the CronJob of
// analysis/config/kargo-project.
//
// It imports client-go's kubernetes.Interface and the Kubernetes API types
// only.
package tokensecret
