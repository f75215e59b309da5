// Package stackcache holds the analysis service's view of the cluster: an
// informer cache of Stacks and Updates (no API call per request), stripped of
// everything a verification never reads (configuration, secrets, outputs,
// managed fields), and a notifier that wakes long polls when a Stack or one
// of its Updates changes.
//
// It imports the operator's API types, controller-runtime's cache and
// client-go.
package stackcache
