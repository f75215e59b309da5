// Package gitresolve resolves git branches to their head commits without
// cloning (the equivalent of `git ls-remote`), with the same credentials the
// workspace uses; Shared does it once per repository and interval for every
// Stack of an operator.
//
// Credentials and their go-git authentication are package gitauth's.
//
// It imports go-git, gitauth and the metrics registry.
package gitresolve

import (
	"context"

	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
)

// Branch returns the commit at the head of branch ("main" or
// "refs/heads/main") in the repository at url, listing it now within the
// default limits.
func Branch(ctx context.Context, url, branch string, auth gitauth.Credentials) (string, error) {
	return (&Shared{}).Branch(ctx, url, branch, auth)
}
