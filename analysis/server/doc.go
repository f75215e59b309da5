// Package server holds the analysis service's HTTP API: the verification and
// summary routes for Kubernetes Stacks, the Pulumi Cloud verification route,
// long polls, health, readiness and metrics, with JSON error bodies
// (internal/httperror: a 5xx in fixed words with a request ID, its cause in
// the log).
//
// It answers from a StackSource (the informer cache in production) and asks
// a Guard whether the caller may read what it asks about; it imports the
// verification package, internal/httperror, the operator's API types and
// Prometheus' client.
package server
