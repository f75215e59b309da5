// Package kargosteps will hold Kargo promotion steps that advance a Stack's
// spec.commit in a manifests repository and wait for the operator to apply it.
// Not yet implemented.
package kargosteps
