package agent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/stackflow-io/stackflow/operator/internal/agentclient"
	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
	"github.com/stackflow-io/stackflow/test/framework/fakegithub"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// checkoutServer is a server with a git source and no program, enough for
// checkouts whose fetch fails.
func checkoutServer(t *testing.T, url string) *Server {
	s := newServer(logr.Discard(), newRedactor(), RunRetention{})
	s.source, s.workDir = Source{GitURL: url, GitRef: "main"}, t.TempDir()
	s.program.sourceRef = "main"
	return s
}

// endedCheckout asks s to check ref out and waits (a minute at most) for the
// checkout to end.
func endedCheckout(t *testing.T, s *Server, req *agentv1.CheckoutRequest) *agentv1.CheckoutStatus {
	t.Helper()
	if _, err := s.Checkout(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	c := s.checkout
	s.mu.Unlock()
	select {
	case <-c.done:
	case <-time.After(time.Minute):
		t.Fatalf("the checkout of %s still runs after a minute", req.GetGitRef())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return c.status
}

// TestGitCredentialsRoundTrip: what the operator sends with a Checkout is
// what the agent fetches with.
func TestGitCredentialsRoundTrip(t *testing.T) {
	for _, c := range []gitauth.Credentials{
		{},
		{Token: "tok", Username: "user"},
		{Username: "user", Password: "pw"},
		{SSHPrivateKey: "-----BEGIN KEY-----", Password: "passphrase", KnownHosts: "host ssh-ed25519 AAAA"},
		{GitHubApp: &gitauth.GitHubApp{AppID: "1", InstallationID: "2", PrivateKey: "-----BEGIN RSA-----", APIURL: "https://ghe.example/api/v3"}},
	} {
		if got := credentialsFromRequest(agentclient.GitCredentials(c)); !reflect.DeepEqual(got, c) {
			t.Errorf("round trip of %+v = %+v", c, got)
		}
	}
}

// TestCheckoutCredentialsAreRedactedAndBounded: the credentials a Checkout
// carries are redacted from then on, never quoted in its status, and, rotated
// again and again, keep the redaction list at the current and previous set.
func TestCheckoutCredentialsAreRedactedAndBounded(t *testing.T) {
	refused := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
		http.Error(w, "authentication required", http.StatusUnauthorized)
	}))
	t.Cleanup(refused.Close)
	s := checkoutServer(t, refused.URL+"/repo.git")
	for i := range 20 {
		tok := fmt.Sprintf("rotated-token-%02d", i)
		st := endedCheckout(t, s, &agentv1.CheckoutRequest{GitRef: fmt.Sprintf("ref-%d", i), GitCredentials: &agentv1.GitCredentials{Token: tok, Username: "git"}})
		if st.GetState() != agentv1.CheckoutState_CHECKOUT_STATE_FAILED || st.GetReason() != ReasonSourceUnavailable {
			t.Fatalf("checkout with refused credentials = %v, want failed, SourceUnavailable", st)
		}
		if strings.Contains(st.GetMessage(), "rotated-token") {
			t.Fatalf("the checkout's message quotes its credentials: %s", st.GetMessage())
		}
		if got := s.redact.redact("token " + tok); got != "token [secret]" {
			t.Fatalf("the checkout's token is not redacted: %q", got)
		}
	}
	if got := s.redact.size(); got > 2 {
		t.Fatalf("after 20 rotations the redaction list holds %d values, want the current and the previous token", got)
	}
	if got := s.redact.redact("rotated-token-18 rotated-token-19"); got != "[secret] [secret]" {
		t.Fatalf("the current and previous tokens are not both redacted: %q", got)
	}
}

// hangingServer accepts requests and answers none until the client gives
// up; arrived receives each request's path as it arrives.
func hangingServer(t *testing.T) (*httptest.Server, <-chan string) {
	arrived := make(chan string, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- r.URL.Path:
		default:
		}
		<-r.Context().Done()
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv, arrived
}

// TestCheckoutFetchTimesOut: a git server that never answers fails the
// checkout once --prepare-timeout has passed, classified SourceUnavailable
// (so the Workspace stalls and asks again after a minute) with a message
// saying so; the agent then checks out again.
func TestCheckoutFetchTimesOut(t *testing.T) {
	srv, arrived := hangingServer(t)
	s := checkoutServer(t, srv.URL+"/repo.git")
	s.prepareTimeout = 2 * time.Second
	const ref = "0123456789abcdef0123456789abcdef01234567"
	if _, err := s.Checkout(context.Background(), &agentv1.CheckoutRequest{GitRef: ref}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-time.After(time.Minute):
		t.Fatal("the fetch never reached the git server")
	}
	st := endedCheckout(t, s, &agentv1.CheckoutRequest{GitRef: ref})
	if st.GetState() != agentv1.CheckoutState_CHECKOUT_STATE_FAILED || st.GetReason() != ReasonSourceUnavailable ||
		!strings.Contains(st.GetMessage(), "did not finish within 2s (--prepare-timeout)") {
		t.Fatalf("checkout from a hanging server = %v; want failed, SourceUnavailable, saying it timed out", st)
	}
	if err := s.checkingOut(); err != nil {
		t.Fatalf("the agent still refuses work after the timeout: %v", err)
	}
}

// TestAppTokenRedactionStaysBounded: an agent cloning with a GitHub App gets
// a new installation token whenever the one it has is about to lapse (here
// every fetch: the App's tokens live 4 minutes, less than the 5 minutes a
// cached one must have left). After many checkouts its redaction list holds
// the current and previous token, not one per checkout, and the token the
// last fetch used is still redacted.
func TestAppTokenRedactionStaysBounded(t *testing.T) {
	pe := substrate.NewPulumi(t)
	gh := fakegithub.NewApp(t, "5150", "9001")
	gh.TokenTTL = 4 * time.Minute
	// The agent exchanges through gitauth.DefaultAppTokens; its client
	// trusts the fake GitHub's test authority for this test.
	saved, savedHosts := gitauth.DefaultAppTokens.Client, gitauth.DefaultAppTokens.APIHosts
	gitauth.DefaultAppTokens.Client, gitauth.DefaultAppTokens.APIHosts = gh.Client(), []string{gh.Addr}
	t.Cleanup(func() { gitauth.DefaultAppTokens.Client, gitauth.DefaultAppTokens.APIHosts = saved, savedHosts })
	var mu sync.Mutex
	var used []string // the installation tokens the git server accepted, in order
	repo, srv := gitrepo.NewServedHTTP(t, "infra.git", func(user, password string) bool {
		ok := gh.Authorize(user, password)
		mu.Lock()
		defer mu.Unlock()
		if ok && (len(used) == 0 || used[len(used)-1] != password) {
			used = append(used, password)
		}
		return ok
	})
	const program = "name: apptokens\nruntime: yaml\noutputs:\n  v: %s\n"
	shaA := repo.Commit(t, "a", map[string]string{"Pulumi.yaml": fmt.Sprintf(program, "a")})
	shaB := repo.Commit(t, "b", map[string]string{"Pulumi.yaml": fmt.Sprintf(program, "b")})
	app := gitauth.Credentials{GitHubApp: &gitauth.GitHubApp{AppID: "5150", InstallationID: "9001", PrivateKey: gh.KeyPEM, APIURL: gh.URL}}
	s, err := New(context.Background(), logr.Discard(), Options{WorkDir: t.TempDir(), PulumiRoot: pe.Paths.PulumiRoot, Env: pe.EnvVars(),
		Source: Source{GitURL: repo.HTTPURL(srv), GitRef: shaA, GitAuth: app}})
	if err != nil {
		t.Fatal(err)
	}
	start := s.redact.size() // the App's key and the first token
	const checkouts = 12
	for i := range checkouts {
		ref := shaB
		if i%2 == 1 {
			ref = shaA
		}
		if st := endedCheckout(t, s, &agentv1.CheckoutRequest{GitRef: ref}); st.GetState() != agentv1.CheckoutState_CHECKOUT_STATE_SUCCEEDED {
			t.Fatalf("checkout %d = %v", i, st)
		}
	}
	mu.Lock()
	tokens := slices.Clone(used)
	mu.Unlock()
	if len(tokens) < checkouts+1 {
		t.Fatalf("the git server saw %d installation tokens, want a new one per fetch (%d)", len(tokens), checkouts+1)
	}
	if got := s.redact.size(); got > start+1 {
		t.Fatalf("after %d checkouts with a new installation token each, the redaction list grew from %d to %d values; want at most the previous token more", checkouts, start, got)
	}
	last := tokens[len(tokens)-1]
	if got := s.redact.redact("token " + last); got != "token [secret]" {
		t.Fatalf("the current installation token is not redacted: %q", got)
	}
}

// TestCheckoutInstallTimesOut: a revision whose `pulumi install` hangs (a
// provider plugin downloaded from a server that never answers) fails the
// checkout once --prepare-timeout has passed, classified InstallationFailed
// with the install's last output line, redacted; the previous revision stays
// in place and the agent takes work again.
func TestCheckoutInstallTimesOut(t *testing.T) {
	pe := substrate.NewPulumi(t)
	plugins, arrived := hangingServer(t)
	repo, srv := gitrepo.NewServedHTTP(t, "infra.git", nil)
	const good = "name: installs\nruntime: yaml\noutputs:\n  v: a\n"
	// The download URL carries a secret value, to see the last line redacted
	// should the install print it.
	const secret = "plugin-mirror-secret-7d1e"
	hangs := fmt.Sprintf(`name: installs
runtime: yaml
resources:
  thing:
    type: hangpkg:index:Thing
    options:
      version: 1.2.3
      pluginDownloadURL: %s/%s/
`, plugins.URL, secret)
	shaA := repo.Commit(t, "a", map[string]string{"Pulumi.yaml": good})
	shaB := repo.Commit(t, "b", map[string]string{"Pulumi.yaml": hangs})
	s, err := New(context.Background(), logr.Discard(), Options{WorkDir: t.TempDir(), PulumiRoot: pe.Paths.PulumiRoot, Env: pe.EnvVars(),
		Source: Source{GitURL: repo.HTTPURL(srv), GitRef: shaA}})
	if err != nil {
		t.Fatal(err)
	}
	s.redact.add(secret)
	s.prepareTimeout = 5 * time.Second
	if _, err := s.Checkout(context.Background(), &agentv1.CheckoutRequest{GitRef: shaB}); err != nil {
		t.Fatal(err)
	}
	select {
	case path := <-arrived:
		t.Logf("pulumi install asked the plugin server for %s", path)
	case <-time.After(time.Minute):
		t.Fatal("pulumi install never asked the plugin server")
	}
	st := endedCheckout(t, s, &agentv1.CheckoutRequest{GitRef: shaB})
	t.Logf("checkout: %s", st.GetMessage())
	if st.GetState() != agentv1.CheckoutState_CHECKOUT_STATE_FAILED || st.GetReason() != ReasonInstallationFailed ||
		!strings.Contains(st.GetMessage(), "did not finish within 5s (--prepare-timeout); its last output: ") ||
		strings.HasSuffix(st.GetMessage(), "its last output: (none)") {
		t.Fatalf("checkout with a hanging install = %v; want failed, InstallationFailed, with the install's last line", st)
	}
	if strings.Contains(st.GetMessage(), secret) {
		t.Fatalf("the message holds a secret: %s", st.GetMessage())
	}
	info, err := s.Info(context.Background(), &agentv1.InfoRequest{})
	if err != nil || info.GetRevision() != shaA {
		t.Fatalf("after the failed checkout the agent holds %s (%v), want %s", info.GetRevision(), err, shaA)
	}
	if err := s.checkingOut(); err != nil {
		t.Fatalf("the agent still refuses work after the timeout: %v", err)
	}
}

// TestInstallOutputLastLine: the install's output reaches the log and the
// timeout's message a whole line at a time, redacted, even when a secret
// arrives split across two writes or the command is killed mid-line.
func TestInstallOutputLastLine(t *testing.T) {
	const secret = "mirror-token-3f9a0c"
	red := newRedactor()
	red.add(secret)
	var logged []string
	log := funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{})
	last := &lastLine{}
	if got := last.String(); got != "(none)" {
		t.Fatalf("no output: %q", got)
	}
	stdout, stderr := newLogWriter(log, red, last), newLogWriter(log, red, last)
	for _, w := range []struct {
		to *lineWriter
		p  string
	}{
		{stdout, "Installing plugin hangpkg\n\n"},
		{stderr, "GET https://plugins.example/" + secret[:7]},
		{stderr, secret[7:] + "/hangpkg.tar.gz\n"},
		{stdout, "  downloading hangpkg 1.2.3 from https://plugins.example/" + secret + "/ 12%"},
	} {
		if _, err := w.to.Write([]byte(w.p)); err != nil {
			t.Fatal(err)
		}
	}
	if got := last.String(); got != "GET https://plugins.example/[secret]/hangpkg.tar.gz" {
		t.Fatalf("last complete line = %q", got)
	}
	stdout.Flush() // the command was killed while printing its progress
	stderr.Flush()
	if got := last.String(); got != "downloading hangpkg 1.2.3 from https://plugins.example/[secret]/ 12%" {
		t.Fatalf("last line after the kill = %q", got)
	}
	if all := strings.Join(logged, "\n"); strings.Contains(all, secret) || strings.Contains(all, secret[:7]) || len(logged) != 3 {
		t.Fatalf("logged %d lines (want 3, redacted):\n%s", len(logged), all)
	}
}
