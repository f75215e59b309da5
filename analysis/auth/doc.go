// Package auth authenticates and authorises callers of the analysis service
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
// It imports the Kubernetes API types, client-go's kubernetes.Interface and the
// Prometheus client only; it holds no HTTP handlers (the server wires Check into
// its own) and no other Stackflow package. Its tests run against a fake
// clientset and against a real kube-apiserver (operator/test/substrate).
//
// Neither a token nor its text in clear appears in a cache key or an error
// message: tokens are keyed by their SHA-256.
package auth
