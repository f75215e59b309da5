// Package gitresolve resolves a git branch to its head commit without cloning
// (the equivalent of `git ls-remote`), with the same credentials the workspace
// uses.
//
// It imports go-git only.
package gitresolve

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/memory"
)

// Auth holds git credentials; values are secrets and never appear in errors.
type Auth struct {
	Token, Username, Password, SSHPrivateKey string
}

func (a Auth) method() (transport.AuthMethod, error) {
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
// "refs/heads/main") in the repository at url.
func Branch(ctx context.Context, url, branch string, auth Auth) (string, error) {
	m, err := auth.method()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	remote := git.NewRemote(memory.NewStorage(), &gitconfig.RemoteConfig{Name: "origin", URLs: []string{url}})
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: m})
	if err != nil {
		return "", fmt.Errorf("list references of %s: %w", url, err)
	}
	want := plumbing.ReferenceName("refs/heads/" + strings.TrimPrefix(branch, "refs/heads/"))
	for _, r := range refs {
		if r.Name() == want {
			return r.Hash().String(), nil
		}
	}
	return "", fmt.Errorf("branch %s not found in %s", strings.TrimPrefix(branch, "refs/heads/"), url)
}
