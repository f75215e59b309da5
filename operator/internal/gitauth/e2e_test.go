package gitauth_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stackflow-io/stackflow/operator/internal/agent"
	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
	"github.com/stackflow-io/stackflow/operator/internal/gitresolve"
	"github.com/stackflow-io/stackflow/test/framework/fakegithub"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

const program = "name: p\nruntime: yaml\n"

// resolveAndClone does what the operator and the workspace do with
// credentials: the resolver lists the branch (ls-remote), the agent clones
// the commit it found. It returns the first error.
func resolveAndClone(t *testing.T, url string, creds gitauth.Credentials) (string, error) {
	t.Helper()
	sha, err := gitresolve.Branch(context.Background(), url, "main", creds)
	if err != nil {
		return "", err
	}
	dir := t.TempDir()
	fetched, err := agent.Fetch(context.Background(), agent.Source{GitURL: url, GitRef: sha, GitAuth: creds}, dir)
	if err != nil {
		return "", err
	}
	if b, err := os.ReadFile(filepath.Join(fetched.ProgramDir, "Pulumi.yaml")); err != nil || string(b) != program {
		t.Fatalf("clone at %s: Pulumi.yaml %q, %v", sha, b, err)
	}
	return sha, nil
}

// agentRefuses checks the agent's classification of a credentials failure:
// the workspace reports SourceUnavailable.
func agentRefuses(t *testing.T, url string, creds gitauth.Credentials) error {
	t.Helper()
	_, err := agent.Fetch(context.Background(), agent.Source{GitURL: url, GitRef: "main", GitAuth: creds}, t.TempDir())
	if err == nil {
		t.Fatal("the agent cloned with bad credentials")
	}
	if got := agent.FailureReason(err); got != agent.ReasonSourceUnavailable {
		t.Errorf("agent error %q classified %q, want %s", err, got, agent.ReasonSourceUnavailable)
	}
	return err
}

func noSecret(t *testing.T, err error, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(err.Error(), s) {
			t.Fatalf("error %q holds a secret", err)
		}
	}
}

// TestGitHubAppEndToEnd: a git smart-HTTP server that accepts only
// x-access-token with a token the fake GitHub issued; the resolver and the
// agent exchange the App's JWT for one and succeed; a wrong key, an unknown
// installation, or a token the server does not accept fail clearly.
func TestGitHubAppEndToEnd(t *testing.T) {
	gh := fakegithub.NewApp(t, "31337", "4001")
	// The resolver and the agent exchange tokens through the process's
	// default AppTokens: have it trust the fake's certificate.
	saved, savedHosts := gitauth.DefaultAppTokens.Client, gitauth.DefaultAppTokens.APIHosts
	gitauth.DefaultAppTokens.Client, gitauth.DefaultAppTokens.APIHosts = gh.Client(), []string{gh.Addr}
	t.Cleanup(func() { gitauth.DefaultAppTokens.Client, gitauth.DefaultAppTokens.APIHosts = saved, savedHosts })
	repo, srv := gitrepo.NewServedHTTP(t, "app.git", gh.Authorize)
	want := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": program})
	url := repo.HTTPURL(srv)

	good := gitauth.Credentials{GitHubApp: &gitauth.GitHubApp{AppID: "31337", InstallationID: "4001", PrivateKey: gh.KeyPEM, APIURL: gh.URL}}
	sha, err := resolveAndClone(t, url, good)
	if err != nil || sha != want {
		t.Fatalf("resolve and clone with the App: %s, %v (want %s)", sha, err, want)
	}
	if gh.Calls() != 1 {
		t.Fatalf("%d token exchanges for a resolution and a clone, want 1 (cached)", gh.Calls())
	}

	otherKey := fakegithub.PEM(fakegithub.NewKey(t))
	for _, tc := range []struct {
		name  string
		creds gitauth.Credentials
		say   string
	}{
		{"key of another App", gitauth.Credentials{GitHubApp: &gitauth.GitHubApp{AppID: "31337", InstallationID: "4001", PrivateKey: otherKey, APIURL: gh.URL}},
			"answered 401: A JSON web token could not be decoded; check githubApp.appID and githubApp.privateKey"},
		{"unknown installation", gitauth.Credentials{GitHubApp: &gitauth.GitHubApp{AppID: "31337", InstallationID: "4002", PrivateKey: gh.KeyPEM, APIURL: gh.URL}},
			"answered 404: Not Found; installation 4002 is not an installation of App 31337"},
		{"a token the git server refuses", gitauth.Credentials{Token: "ghs_not-issued"}, "authentication required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gitresolve.Branch(context.Background(), url, "main", tc.creds)
			if err == nil || !gitresolve.IsUnavailable(err) || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("resolver: %v (permanent %v), want it to say %q", err, gitresolve.IsUnavailable(err), tc.say)
			}
			noSecret(t, err, otherKey, gh.KeyPEM, "ghs_not-issued")
			err = agentRefuses(t, url, tc.creds)
			if !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("agent: %v, want it to say %q", err, tc.say)
			}
			noSecret(t, err, otherKey, gh.KeyPEM, "ghs_not-issued")
		})
	}
}

// TestSSHEndToEnd: a real SSH git server (git-upload-pack on a bare
// repository); the resolver and the agent succeed when known_hosts has the
// server's key, and fail clearly, as permanent source errors, when it has
// another key, no entry for the host, or when none is configured.
func TestSSHEndToEnd(t *testing.T) {
	key := gitrepo.NewSSHKey(t)
	root := t.TempDir()
	repo := gitrepo.NewIn(t, root, "ssh.git")
	want := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": program})
	srv := gitrepo.NewSSHServer(t, root, key.Public)
	url := repo.SSHURL(srv)

	sha, err := resolveAndClone(t, url, gitauth.Credentials{SSHPrivateKey: key.PrivateKey, KnownHosts: srv.KnownHosts()})
	if err != nil || sha != want {
		t.Fatalf("resolve and clone over SSH: %s, %v (want %s)", sha, err, want)
	}
	if execs := srv.Execs(); len(execs) < 2 || !strings.HasPrefix(execs[0], "git-upload-pack '/ssh.git'") {
		t.Fatalf("server ran %q", execs)
	}

	impostor := gitrepo.NewSSHServer(t, root, key.Public) // another host key
	mismatch := impostor.KnownHostsAs(srv.Addr)
	for _, tc := range []struct {
		name       string
		knownHosts string
		say        []string
		key        string
	}{
		{"key the server does not accept", srv.KnownHosts(), []string{"ssh: unable to authenticate"}, gitrepo.NewSSHKey(t).PrivateKey},
		{"known_hosts with another key", mismatch, []string{"host key for [127.0.0.1]:", "does not match any known_hosts entry", "1 other key(s)"}, ""},
		{"known_hosts without the host", impostor.KnownHosts(), []string{"does not match any known_hosts entry", "no entry for this host"}, ""},
		{"no known_hosts", "", []string{"spec.gitAuth.sshAuth.knownHosts", "--ssh-known-hosts"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			creds := gitauth.Credentials{SSHPrivateKey: key.PrivateKey, KnownHosts: tc.knownHosts}
			if tc.key != "" {
				creds.SSHPrivateKey = tc.key
			}
			_, err := gitresolve.Branch(context.Background(), url, "main", creds)
			if err == nil || !gitresolve.IsUnavailable(err) {
				t.Fatalf("resolver: %v (permanent %v)", err, gitresolve.IsUnavailable(err))
			}
			aerr := agentRefuses(t, url, creds)
			for _, e := range []error{err, aerr} {
				for _, s := range tc.say {
					if !strings.Contains(e.Error(), s) {
						t.Errorf("error %q does not say %q", e, s)
					}
				}
				noSecret(t, e, key.PrivateKey, tc.key)
			}
			var he *gitauth.HostKeyError
			if tc.knownHosts != "" && tc.key == "" && !errors.As(err, &he) {
				t.Errorf("resolver error %v is not a HostKeyError", err)
			}
		})
	}
}
