// Package kubeauth authenticates and authorises callers of the analysis service
// against the Kubernetes API: a caller's bearer token (a ServiceAccount token)
// is checked with a TokenReview, and its right to read a Stack (get on
// stacks.pulumi.com) or a Pulumi Cloud route (get on a non-resource URL) with a
// SubjectAccessReview.
//
// It holds the Authorizer (auth.go), the bounded, time-limited caches of the
// answers with their hit and miss counts (cache.go), the typed errors an HTTP
// server maps to 401, 403 and 503 (errors.go), and a Prometheus collector of
// the cache counts (metrics.go).
//
// It may import the standard library, k8s.io/api (authentication/v1,
// authorization/v1), k8s.io/apimachinery, client-go's kubernetes.Interface and
// the Prometheus client, and no other Stackflow package; it holds no HTTP
// handler (the server calls Check from its own and writes the status the error
// means, see StatusCode). Its tests may also import client-go's fake clientset
// and test/framework/substrate: they run against a fake clientset (caching,
// clock, errors) and against a real kube-apiserver with real ServiceAccount
// tokens and RBAC.
//
// Neither a token nor its text in clear appears in a cache key or an error
// message: tokens are keyed by their SHA-256.
package kubeauth
