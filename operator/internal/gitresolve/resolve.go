// Package gitresolve resolves git branches to their head commits without
// cloning (the equivalent of `git ls-remote`), with the same credentials the
// workspace uses; Shared does it once per repository and interval for every
// Stack of an operator.
//
// It imports go-git and the metrics registry.
package gitresolve

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
)

// Auth holds git credentials; values are secrets and never appear in errors.
type Auth struct {
	Token, Username, Password, SSHPrivateKey string
}

// Method is the go-git authentication for these credentials (nil for none).
func (a Auth) Method() (transport.AuthMethod, error) {
	switch {
	case a.SSHPrivateKey != "":
		keys, err := gitssh.NewPublicKeys("git", []byte(a.SSHPrivateKey), a.Password)
		if err != nil {
			return nil, errors.New("parse SSH private key: invalid key or password")
		}
		return keys, nil
	case a.Token != "":
		user := a.Username
		if user == "" {
			user = "git"
		}
		return &githttp.BasicAuth{Username: user, Password: a.Token}, nil
	case a.Username != "" || a.Password != "":
		return &githttp.BasicAuth{Username: a.Username, Password: a.Password}, nil
	}
	return nil, nil
}

// Branch returns the commit at the head of branch ("main" or
// "refs/heads/main") in the repository at url, listing it now.
func Branch(ctx context.Context, url, branch string, auth Auth) (string, error) {
	heads, err := ListBranches(ctx, url, auth)
	if err != nil {
		return "", err
	}
	name := strings.TrimPrefix(branch, "refs/heads/")
	sha, ok := heads[name]
	if !ok {
		return "", &UnavailableError{Err: fmt.Errorf("branch %s not found in %s", name, url)}
	}
	return sha, nil
}
