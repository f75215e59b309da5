package gitauth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// CredentialsError: the credentials cannot be used as given (a key that does
// not parse, an ID that is not one). Its message names the field, never a
// value.
type CredentialsError struct{ msg string }

func (e *CredentialsError) Error() string { return e.msg }

// ErrNoKnownHosts: an SSH key is configured but nothing to verify the
// server's host key against. Host keys are never accepted unverified.
var ErrNoKnownHosts = errors.New("SSH host key verification needs known_hosts, and none is configured: " +
	"set spec.gitAuth.sshAuth.knownHosts on the Stack (spec.git.auth.knownHosts on a Workspace, key knownHosts in a gitAuthSecret) " +
	"to a Secret key holding known_hosts lines (e.g. from `ssh-keyscan <host>`), " +
	"or start the operator with --ssh-known-hosts=<file> for every Stack")

// HostKeyError: the SSH server's host key matches no known_hosts entry.
type HostKeyError struct {
	// Host is the server as known_hosts names it ("host" or "[host]:port").
	Host string
	// Fingerprint is the presented key's SHA256 fingerprint.
	Fingerprint string
	// Known is how many keys known_hosts has for the host (0: none).
	Known int
	// Err is knownhosts' *KeyError.
	Err error
}

func (e *HostKeyError) Error() string {
	why := "known_hosts has no entry for this host"
	if e.Known > 0 {
		why = fmt.Sprintf("known_hosts has %d other key(s) for it: the key changed, or someone is impersonating the server", e.Known)
	}
	return fmt.Sprintf("host key for %s (%s) does not match any known_hosts entry: %s; add the server's key (verify it, e.g. from `ssh-keyscan`) to the configured known_hosts",
		e.Host, e.Fingerprint, why)
}

func (e *HostKeyError) Unwrap() error { return e.Err }

// Method is the go-git authentication for c, nil for none. GitHub App
// credentials are exchanged for an installation token by tokens (nil:
// DefaultAppTokens), sent as basic auth with user x-access-token; an SSH key
// verifies the server against c.KnownHosts. Errors never hold a credential.
func (c Credentials) Method(ctx context.Context, tokens *AppTokens) (transport.AuthMethod, error) {
	switch {
	case c.GitHubApp != nil:
		if tokens == nil {
			tokens = DefaultAppTokens
		}
		tok, err := tokens.Token(ctx, *c.GitHubApp)
		if err != nil {
			return nil, err
		}
		return &githttp.BasicAuth{Username: AppTokenUser, Password: tok}, nil
	case c.SSHPrivateKey != "":
		return c.sshMethod()
	case c.Token != "":
		user := c.Username
		if user == "" {
			user = "git"
		}
		return &githttp.BasicAuth{Username: user, Password: c.Token}, nil
	case c.Username != "" || c.Password != "":
		return &githttp.BasicAuth{Username: c.Username, Password: c.Password}, nil
	}
	return nil, nil
}

func (c Credentials) sshMethod() (transport.AuthMethod, error) {
	keys, err := gitssh.NewPublicKeys("git", []byte(c.SSHPrivateKey), c.Password)
	if err != nil {
		return nil, &CredentialsError{msg: "parse SSH private key: invalid key or password"}
	}
	if strings.TrimSpace(c.KnownHosts) == "" {
		return nil, ErrNoKnownHosts
	}
	cb, err := HostKeyCallback(c.KnownHosts)
	if err != nil {
		return nil, err
	}
	keys.HostKeyCallback = cb
	return keys, nil
}

// HostKeyCallback verifies SSH host keys against known_hosts lines
// (OpenSSH's format, hashed names and markers included). A key matching no
// line fails with a *HostKeyError.
func HostKeyCallback(knownHosts string) (ssh.HostKeyCallback, error) {
	// knownhosts reads files only; the lines are public, and read at once.
	f, err := os.CreateTemp("", "known_hosts-*")
	if err != nil {
		return nil, fmt.Errorf("known_hosts: %w", err)
	}
	defer os.Remove(f.Name())
	_, werr := f.WriteString(knownHosts)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, fmt.Errorf("known_hosts: %w", werr)
	}
	cb, err := knownhosts.New(f.Name())
	if err != nil {
		return nil, &CredentialsError{msg: "known_hosts: " + strings.ReplaceAll(err.Error(), f.Name(), "known_hosts")}
	}
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := cb(hostname, remote, key)
		var ke *knownhosts.KeyError
		if errors.As(err, &ke) {
			// Unwrap keeps *KeyError visible: go-git asks the callback with
			// a placeholder key which algorithms the host's keys use.
			return &HostKeyError{Host: knownhosts.Normalize(hostname), Fingerprint: ssh.FingerprintSHA256(key), Known: len(ke.Want), Err: ke}
		}
		return err
	}, nil
}
