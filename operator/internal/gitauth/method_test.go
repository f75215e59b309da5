package gitauth

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

func basic(m transport.AuthMethod) (user, pass string, ok bool) {
	b, ok := m.(*githttp.BasicAuth)
	if !ok {
		return "", "", false
	}
	return b.Username, b.Password, true
}

// TestMethod: each kind of credentials makes its go-git authentication
// (the behaviour of the kinds that existed before this package is kept).
func TestMethod(t *testing.T) {
	key := gitrepo.NewSSHKey(t)
	for _, tc := range []struct {
		name       string
		c          Credentials
		user, pass string
		ssh, none  bool
		err        error
	}{
		{name: "none", c: Credentials{}, none: true},
		{name: "token", c: Credentials{Token: "tok"}, user: "git", pass: "tok"},
		{name: "token with user", c: Credentials{Token: "tok", Username: "me"}, user: "me", pass: "tok"},
		{name: "basic", c: Credentials{Username: "me", Password: "pw"}, user: "me", pass: "pw"},
		{name: "ssh with known_hosts", c: Credentials{SSHPrivateKey: key.PrivateKey, KnownHosts: "example.com " + string(ssh.MarshalAuthorizedKey(key.Public))}, ssh: true},
		{name: "ssh without known_hosts", c: Credentials{SSHPrivateKey: key.PrivateKey}, err: ErrNoKnownHosts},
		{name: "ssh with blank known_hosts", c: Credentials{SSHPrivateKey: key.PrivateKey, KnownHosts: " \n"}, err: ErrNoKnownHosts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := tc.c.Method(context.Background(), nil)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !IsPermanent(err) {
					t.Fatalf("err = %v, want %v (permanent)", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.none:
				if m != nil {
					t.Fatalf("method %v for no credentials", m)
				}
			case tc.ssh:
				k, ok := m.(*gitssh.PublicKeys)
				if !ok || k.HostKeyCallback == nil {
					t.Fatalf("method %T without a host key callback", m)
				}
			default:
				user, pass, ok := basic(m)
				if !ok || user != tc.user || pass != tc.pass {
					t.Fatalf("basic auth %q:%q (%v), want %q:%q", user, pass, ok, tc.user, tc.pass)
				}
			}
		})
	}
}

func TestMethodErrorsHoldNoSecret(t *testing.T) {
	const bad = "-----BEGIN OPENSSH PRIVATE KEY-----\nbm90LWEta2V5LXNlY3JldA==\n-----END OPENSSH PRIVATE KEY-----\n"
	_, err := Credentials{SSHPrivateKey: bad, Password: "pw-secret", KnownHosts: "x ssh-ed25519 AAAA"}.Method(context.Background(), nil)
	var ce *CredentialsError
	if !errors.As(err, &ce) || !IsPermanent(err) {
		t.Fatalf("err = %v, want a CredentialsError", err)
	}
	for _, s := range []string{"bm90LWEta2V5LXNlY3JldA", "pw-secret"} {
		if strings.Contains(err.Error(), s) {
			t.Fatalf("error %q holds a secret", err)
		}
	}
}

// TestHostKeyCallback: a matching key passes; a changed key and an unknown
// host fail with a HostKeyError naming the host, that still unwraps to
// knownhosts' KeyError (go-git's host key algorithms rely on it).
func TestHostKeyCallback(t *testing.T) {
	good, other := gitrepo.NewSSHKey(t).Public, gitrepo.NewSSHKey(t).Public
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2222}
	lines := knownhosts.Line([]string{knownhosts.Normalize("127.0.0.1:2222")}, good) + "\n" +
		knownhosts.Line([]string{"github.com"}, other) + "\n"
	cb, err := HostKeyCallback(lines)
	if err != nil {
		t.Fatal(err)
	}
	if err := cb("127.0.0.1:2222", addr, good); err != nil {
		t.Fatalf("matching key refused: %v", err)
	}
	for _, tc := range []struct {
		name, host string
		key        ssh.PublicKey
		known      int
		say        string
	}{
		{"changed key", "127.0.0.1:2222", other, 1, "does not match any known_hosts entry: known_hosts has 1 other key(s)"},
		{"unknown host", "127.0.0.1:2223", good, 0, "known_hosts has no entry for this host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := cb(tc.host, addr, tc.key)
			var he *HostKeyError
			var ke *knownhosts.KeyError
			if !errors.As(err, &he) || !errors.As(err, &ke) || !IsPermanent(err) {
				t.Fatalf("err = %v", err)
			}
			if he.Known != tc.known || !strings.Contains(err.Error(), "host key for "+knownhosts.Normalize(tc.host)) ||
				!strings.Contains(err.Error(), tc.say) || !strings.Contains(err.Error(), ssh.FingerprintSHA256(tc.key)) {
				t.Fatalf("err = %q (known %d)", err, he.Known)
			}
		})
	}
	if _, err := HostKeyCallback("@cert-authority\n"); err == nil {
		t.Fatal("a malformed known_hosts was accepted")
	}
}
