package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/test/framework/fakegithub"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

func secretRef(name, key string) pulumiv1.ResourceRef {
	return pulumiv1.ResourceRef{SelectorType: pulumiv1.ResourceSelectorSecret,
		ResourceSelector: pulumiv1.ResourceSelector{SecretRef: &pulumiv1.SecretSelector{Name: name, Key: key}}}
}

func createSecret(t *testing.T, ns, name string, data map[string]string) *corev1.Secret {
	t.Helper()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data}
	if err := cp.Client.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	return sec
}

// stalledSaying: the Stack is Stalled (SourceUnavailable) with a message
// holding every part of say.
func stalledSaying(say ...string) func(*pulumiv1.Stack) bool {
	return func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.StalledCondition)
		if c == nil || c.Reason != pulumiv1.StalledSourceUnavailableReason {
			return false
		}
		for _, part := range say {
			if !strings.Contains(c.Message, part) {
				return false
			}
		}
		return true
	}
}

// noSecretInStatus fails when a secret value appears in the Stack's status.
func noSecretInStatus(t *testing.T, s *pulumiv1.Stack, secrets ...string) {
	t.Helper()
	for _, c := range s.Status.Conditions {
		for _, v := range secrets {
			if strings.Contains(c.Message, v) {
				t.Fatalf("condition %s holds a secret: %s", c.Type, c.Message)
			}
		}
	}
}

// TestStackGitAuthSSH: Stacks tracking a branch on a real SSH git server.
// One names a knownHosts Secret holding another server's key: it stalls
// saying the host key matches no known_hosts entry, and deploys once the
// Secret holds the server's key (resolver and agent both verify it). The
// other names none and is verified with the operator's --ssh-known-hosts.
func TestStackGitAuthSSH(t *testing.T) {
	repo := gitrepo.New(t)
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})
	key := gitrepo.NewSSHKey(t)
	srv := gitrepo.NewSSHServer(t, filepath.Dir(repo.Bare), key.Public)
	impostor := gitrepo.NewSSHServer(t, t.TempDir(), key.Public)

	e := newEnv(t)
	e.opts.StackResyncOverride = time.Second
	e.opts.SecretPollInterval = time.Second
	e.opts.SSHKnownHosts = srv.KnownHosts()
	startOperator(t, e.opts)

	// known_hosts naming this server's address with the impostor's key.
	wrong := impostor.KnownHostsAs(srv.Addr)
	sec := createSecret(t, e.ns, "git-ssh", map[string]string{"key": key.PrivateKey, "known_hosts": wrong})
	kh := secretRef("git-ssh", "known_hosts")
	own := newStack(e.ns, "ssh-own", pulumiv1.StackSpec{Stack: "ssh-own", GitSource: &pulumiv1.GitSource{ProjectRepo: repo.SSHURL(srv), Branch: "main",
		GitAuth: &pulumiv1.GitAuthConfig{SSHAuth: &pulumiv1.SSHAuth{SSHPrivateKey: secretRef("git-ssh", "key"), KnownHosts: &kh}}},
		Config: cfg("recordName", "ssh-own", "content", "own")})
	shared := newStack(e.ns, "ssh-operator", pulumiv1.StackSpec{Stack: "ssh-operator", GitSource: &pulumiv1.GitSource{ProjectRepo: repo.SSHURL(srv), Branch: "main",
		GitAuth: &pulumiv1.GitAuthConfig{SSHAuth: &pulumiv1.SSHAuth{SSHPrivateKey: secretRef("git-ssh", "key")}}},
		Config: cfg("recordName", "ssh-operator", "content", "operator")})
	for _, s := range []*pulumiv1.Stack{own, shared} {
		if err := cp.Client.Create(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	waitStack(t, own, time.Minute, "stalled on the host key", stalledSaying("host key for [127.0.0.1]:", "does not match any known_hosts entry"))
	noSecretInStatus(t, own, key.PrivateKey)

	mutate(t, sec, func() { sec.Data["known_hosts"] = []byte(srv.KnownHosts()) })
	waitStack(t, own, 3*time.Minute, "ready once known_hosts has the server's key", readyAt(sha))
	waitStack(t, shared, 3*time.Minute, "ready with the operator's known_hosts", readyAt(sha))
	if got, _ := e.pe.Record(t, "ssh-own"); got != "own" {
		t.Fatalf("record = %q", got)
	}
}

// TestStackGitAuthGitHubApp: a Stack on a git HTTP server that accepts only
// installation tokens of a (fake) GitHub App: with an installation ID the
// App does not have it stalls with GitHub's answer and the field to fix;
// with the right one the operator resolves the branch and the workspace
// clones, each with an installation token.
func TestStackGitAuthGitHubApp(t *testing.T) {
	gh := fakegithub.NewApp(t, "5150", "9001")
	repo, srv := gitrepo.NewServedHTTP(t, "infra.git", gh.Authorize)
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})

	e := newEnv(t)
	e.opts.StackResyncOverride = time.Second
	e.opts.SecretPollInterval = time.Second
	// The fake GitHub serves HTTPS (the only apiURL accepted) with a test
	// authority, trusted as a GitHub Enterprise Server's private one is: the
	// workspace agents through SSL_CERT_FILE, the operator in this process
	// through its token exchange's client.
	caFile := filepath.Join(t.TempDir(), "fake-github-ca.pem")
	if err := os.WriteFile(caFile, fakegithub.CAPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	e.opts.AgentEnv["SSL_CERT_FILE"] = caFile
	e.opts.GitHubAppClient = gh.Client()
	// The fake's loopback host is a GitHub Enterprise Server's, which the
	// operator and its agents reach only when listed.
	e.opts.GitHubAPIHosts = []string{gh.Addr}
	startOperator(t, e.opts)

	sec := createSecret(t, e.ns, "github-app", map[string]string{"id": "5150", "installation": "9002\n", "key.pem": gh.KeyPEM})
	s := newStack(e.ns, "app", pulumiv1.StackSpec{Stack: "app", GitSource: &pulumiv1.GitSource{ProjectRepo: repo.HTTPURL(srv), Branch: "main",
		GitAuth: &pulumiv1.GitAuthConfig{GitHubApp: &pulumiv1.GitHubAppAuth{AppID: secretRef("github-app", "id"),
			InstallationID: secretRef("github-app", "installation"), PrivateKey: secretRef("github-app", "key.pem"), APIURL: gh.URL}}},
		Config: cfg("recordName", "app", "content", "from-app")})
	if err := cp.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitStack(t, s, time.Minute, "stalled on the unknown installation", stalledSaying("answered 404", "installation 9002 is not an installation of App 5150", "githubApp.installationID"))
	noSecretInStatus(t, s, gh.KeyPEM, "PRIVATE KEY")

	mutate(t, sec, func() { sec.Data["installation"] = []byte("9001\n") })
	waitStack(t, s, 3*time.Minute, "ready with the App's installation token", readyAt(sha))
	if got, _ := e.pe.Record(t, "app"); got != "from-app" {
		t.Fatalf("record = %q", got)
	}
	if gh.Calls() < 2 {
		t.Fatalf("%d token exchanges, want the failed one and at least one more", gh.Calls())
	}
}

// TestStackGitTokenRotation: a Stack on a git server (smart HTTP, basic
// auth) that accepts one personal access token at a time. Once it deployed,
// the token is rotated on the server — the old one is refused from then on —
// and in the Stack's Secret; the next commit deploys without anyone touching
// the workspace: the same agent process checks it out in place, fetching
// with the new token the operator sent with the Checkout. Neither token
// appears in a status or in the agent's log.
func TestStackGitTokenRotation(t *testing.T) {
	const oldToken, newToken = "pat-old-5c0e91d7a3", "pat-new-84b2f6e0c1"
	var mu sync.Mutex
	valid := oldToken
	repo, srv := gitrepo.NewServedHTTP(t, "infra.git", func(_, password string) bool {
		mu.Lock()
		defer mu.Unlock()
		return password == valid
	})
	url := repo.HTTPURL(srv)
	sha1 := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})

	e := newEnv(t)
	e.opts.StackResyncOverride = time.Second
	e.opts.SecretPollInterval = time.Second
	startOperator(t, e.opts)
	sec := createSecret(t, e.ns, "git-pat", map[string]string{"token": oldToken})
	pat := secretRef("git-pat", "token")
	s := newStack(e.ns, "rotating", pulumiv1.StackSpec{Stack: "rotating", GitSource: &pulumiv1.GitSource{ProjectRepo: url, Branch: "main",
		GitAuth: &pulumiv1.GitAuthConfig{PersonalAccessToken: &pat}}, Config: cfg("recordName", "rotating", "content", "one")})
	if err := cp.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitStack(t, s, 3*time.Minute, "ready at the first commit", readyAt(sha1))
	pid := agentPID(t, e, "rotating")

	mu.Lock()
	valid = newToken
	mu.Unlock()
	if code := gitRefsStatus(t, url, oldToken); code != http.StatusUnauthorized {
		t.Fatalf("the git server answers %d to the old token, want 401", code)
	}
	mutate(t, sec, func() { sec.Data["token"] = []byte(newToken) })
	sha2 := repo.Commit(t, "v2", map[string]string{"Pulumi.yaml": strings.Replace(stackProgram, "content: ${content}", "content: rotated-${content}", 1)})
	waitStack(t, s, 3*time.Minute, "ready at the commit pushed after the rotation", readyAt(sha2))
	if got, _ := e.pe.Record(t, "rotating"); got != "rotated-one" {
		t.Fatalf("record = %q, want the second commit's", got)
	}
	if got := agentPID(t, e, "rotating"); got != pid {
		t.Fatalf("the agent was replaced (pid %d, was %d): the new token should reach the running agent", got, pid)
	}

	noSecretInStatus(t, s, oldToken, newToken)
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "rotating"}}
	if err := get(t, ws); err != nil {
		t.Fatal(err)
	}
	st, _ := json.Marshal(ws.Status)
	log, err := os.ReadFile(filepath.Join(e.opts.LocalRoot, e.ns, "rotating", "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{oldToken, newToken} {
		if strings.Contains(string(st), tok) || strings.Contains(string(log), tok) {
			t.Fatalf("a token appears in the Workspace's status or the agent's log")
		}
	}
}

// gitRefsStatus is the git server's answer to a clone's first request made
// with token.
func gitRefsStatus(t *testing.T, url, token string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+"/info/refs?service=git-upload-pack", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("git", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
