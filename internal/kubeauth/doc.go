// Package kubeauth authenticates and authorises callers of the analysis service
// against the Kubernetes API: a caller's bearer token (a ServiceAccount token)
// is checked with a TokenReview, and its right to read a Stack (get on
// stacks.pulumi.com) or a Pulumi Cloud route (get on a non-resource URL) with a
// SubjectAccessReview.
//
// It holds the Authorizer (auth.go), the bounded, time-limited caches of the
// answers with their hit and miss counts (cache.go), the typed errors an HTTP
// server maps to 401, 403 and 503 (errors.go), and a Prometheus collector of
// the cache counts (metrics.go). Each error says its status, its reason and
// the message an answer may carry (HTTPError); its Error text is for the
// server's log: a 503's holds the API server's own words (its URL, the
// service's ServiceAccount), which no caller reads.
//
// It may import the standard library, k8s.io/api (authentication/v1,
// authorization/v1), k8s.io/apimachinery, client-go's kubernetes.Interface,
// the Prometheus client and internal/redact, and no other Stackflow package;
// it holds no HTTP handler (the server calls Check from its own and answers
// the error with internal/httperror.Error). Its tests may also import client-go's fake clientset
// and test/framework/substrate: they run against a fake clientset (caching,
// clock, errors) and against a real kube-apiserver with real ServiceAccount
// tokens and RBAC.
//
// Neither a token nor its text in clear appears in a cache key or an error
// message: tokens are keyed by their SHA-256.
package kubeauth
