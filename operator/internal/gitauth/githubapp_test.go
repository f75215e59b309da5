package gitauth

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stackflow-io/stackflow/test/framework/fakegithub"
)

// TestReusable: the cache decision, a pure function of the token and the
// clock.
func TestReusable(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		tok  appToken
		want bool
	}{
		{"no token", appToken{}, false},
		{"fresh (1 h left)", appToken{token: "t", expires: now.Add(time.Hour)}, true},
		{"just over the refresh margin", appToken{token: "t", expires: now.Add(RefreshBefore + time.Second)}, true},
		{"at the refresh margin", appToken{token: "t", expires: now.Add(RefreshBefore)}, false},
		{"inside the margin", appToken{token: "t", expires: now.Add(time.Minute)}, false},
		{"expired", appToken{token: "t", expires: now.Add(-time.Minute)}, false},
		{"empty token with a future expiry", appToken{expires: now.Add(time.Hour)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := reusable(tc.tok, now); got != tc.want {
				t.Fatalf("reusable = %v, want %v", got, tc.want)
			}
		})
	}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestAppTokensCacheAndRefresh: one exchange serves until shortly before the
// token expires, then a new one is made; the server verified every JWT.
func TestAppTokensCacheAndRefresh(t *testing.T) {
	clk := &clock{t: time.Now()}
	gh := fakegithub.NewApp(t, "4242", "777")
	gh.Now = clk.now
	tokens := &AppTokens{Now: clk.now, Client: gh.Client(), APIHosts: []string{gh.Addr}}
	app := GitHubApp{AppID: "4242", InstallationID: "777", PrivateKey: gh.KeyPEM, APIURL: gh.URL}
	ctx := context.Background()

	first, err := tokens.Token(ctx, app)
	if err != nil {
		t.Fatal(err)
	}
	if !gh.Valid(first) {
		t.Fatal("the token returned is not one GitHub issued")
	}
	for range 5 {
		clk.add(10 * time.Minute) // 50 minutes in: still more than 5 minutes left
		tok, err := tokens.Token(ctx, app)
		if err != nil || tok != first {
			t.Fatalf("within the token's life: %v, new token %v", err, tok != first)
		}
	}
	if gh.Calls() != 1 {
		t.Fatalf("%d exchanges, want 1 (cache reuse)", gh.Calls())
	}
	clk.add(6 * time.Minute) // 56 minutes: inside the refresh margin
	second, err := tokens.Token(ctx, app)
	if err != nil {
		t.Fatal(err)
	}
	if second == first || gh.Calls() != 2 || !gh.Valid(second) {
		t.Fatalf("near expiry: new token %v, %d exchanges (want a refresh, 2)", second != first, gh.Calls())
	}
	if len(tokens.cache) != 1 || tokens.cache[Credentials{GitHubApp: &app}.Fingerprint()].token != second {
		t.Fatal("the cache does not hold the current token alone (the expired one is dropped)")
	}
	// Another installation of the same App is another cache entry.
	other := app
	other.InstallationID = "778"
	if _, err := tokens.Token(ctx, other); err == nil {
		t.Fatal("unknown installation issued a token")
	}
	if tok, _ := tokens.Token(ctx, app); tok != second || gh.Calls() != 3 {
		t.Fatalf("cache lost after another installation's failure (%d calls)", gh.Calls())
	}
}

// TestAppTokensErrors: GitHub's refusals become clear, secret-free,
// permanent errors; bad input fails before any request.
func TestAppTokensErrors(t *testing.T) {
	gh := fakegithub.NewApp(t, "4242", "777")
	otherKey := fakegithub.PEM(fakegithub.NewKey(t))
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		app       GitHubApp
		want      []string
		status    int
		permanent bool
		requests  int
	}{
		{"key of another App", GitHubApp{AppID: "4242", InstallationID: "777", PrivateKey: otherKey, APIURL: gh.URL},
			[]string{"401", "A JSON web token could not be decoded", "check githubApp.appID and githubApp.privateKey"}, 401, true, 1},
		{"wrong App ID", GitHubApp{AppID: "1", InstallationID: "777", PrivateKey: gh.KeyPEM, APIURL: gh.URL},
			[]string{"401", "'Issuer' claim", "check githubApp.appID"}, 401, true, 1},
		{"unknown installation", GitHubApp{AppID: "4242", InstallationID: "999", PrivateKey: gh.KeyPEM, APIURL: gh.URL},
			[]string{"404", "Not Found", "installation 999 is not an installation of App 4242", "githubApp.installationID"}, 404, true, 1},
		{"not a PEM key", GitHubApp{AppID: "4242", InstallationID: "777", PrivateKey: "-----BEGIN NOPE-----\nc2VjcmV0\n", APIURL: gh.URL},
			[]string{"githubApp.privateKey is not a PEM-encoded RSA private key"}, 0, true, 0},
		{"installation ID not numeric", GitHubApp{AppID: "4242", InstallationID: "777/../../x", PrivateKey: gh.KeyPEM, APIURL: gh.URL},
			[]string{"githubApp.installationID must be the installation's numeric ID"}, 0, true, 0},
		{"bad API URL", GitHubApp{AppID: "4242", InstallationID: "777", PrivateKey: gh.KeyPEM, APIURL: "ftp://x"},
			[]string{"githubApp.apiURL"}, 0, true, 0},
		{"GitHub down", GitHubApp{AppID: "4242", InstallationID: "777", PrivateKey: gh.KeyPEM, APIURL: "https://127.0.0.1:1"},
			[]string{"GitHub App installation token", "127.0.0.1:1"}, 0, false, 0},
		// A "?" or "#" would make the appended path a query or fragment:
		// the POST would go to the path the Stack names.
		{"a query cutting off the path", GitHubApp{AppID: "4242", InstallationID: "777", PrivateKey: gh.KeyPEM, APIURL: gh.URL + "/app/installations/777/access_tokens?"},
			[]string{"githubApp.apiURL must be https://", "remove the query or fragment"}, 0, true, 0},
		{"a fragment cutting off the path", GitHubApp{AppID: "4242", InstallationID: "777", PrivateKey: gh.KeyPEM, APIURL: gh.URL + "/app/installations/777/access_tokens#"},
			[]string{"remove the query or fragment"}, 0, true, 0},
		{"plain http", GitHubApp{AppID: "4242", InstallationID: "777", PrivateKey: gh.KeyPEM, APIURL: strings.Replace(gh.URL, "https:", "http:", 1)},
			[]string{`use https, not "http"`}, 0, true, 0},
		{"another path", GitHubApp{AppID: "4242", InstallationID: "777", PrivateKey: gh.KeyPEM, APIURL: gh.URL + "/internal/admin"},
			[]string{`its path is "/internal/admin"`}, 0, true, 0},
		{"user info", GitHubApp{AppID: "4242", InstallationID: "777", PrivateKey: gh.KeyPEM, APIURL: strings.Replace(gh.URL, "https://", "https://admin:hunter2@", 1)},
			[]string{"remove the user info"}, 0, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := gh.Calls()
			_, err := (&AppTokens{Client: gh.Client(), APIHosts: []string{gh.Addr, "127.0.0.1:1"}}).Token(ctx, tc.app)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			for _, secret := range []string{gh.KeyPEM, otherKey, "c2VjcmV0", "BEGIN", "hunter2"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q holds key material", err)
				}
			}
			var tok *TokenError
			if tc.status != 0 && (!errors.As(err, &tok) || tok.Status != tc.status) {
				t.Errorf("error %v is not a TokenError with status %d", err, tc.status)
			}
			if IsPermanent(err) != tc.permanent {
				t.Errorf("IsPermanent = %v, want %v", IsPermanent(err), tc.permanent)
			}
			if got := gh.Calls() - before; got != tc.requests {
				t.Errorf("%d requests made, want %d", got, tc.requests)
			}
		})
	}
}

// TestMethodGitHubApp: the installation token is basic auth as
// x-access-token.
func TestMethodGitHubApp(t *testing.T) {
	gh := fakegithub.NewApp(t, "1", "2")
	c := Credentials{GitHubApp: &GitHubApp{AppID: "1", InstallationID: "2", PrivateKey: gh.KeyPEM, APIURL: gh.URL + "/"}}
	m, err := c.Method(context.Background(), &AppTokens{Client: gh.Client(), APIHosts: []string{gh.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	user, pass, ok := basic(m)
	if !ok || user != AppTokenUser || !gh.Valid(pass) {
		t.Fatalf("method %s: user %q, token valid %v", m, user, gh.Valid(pass))
	}
	if strings.Contains(m.String(), pass) {
		t.Fatalf("the method's String() shows the token: %s", m)
	}
}

// TestUnreachableAPIsSayTheSame: whatever keeps an allowed apiURL from
// answering — nothing listening, a server that never answers, one that is
// not TLS, one whose certificate is not trusted — the error says the same,
// so that a Stack author choosing the apiURL learns nothing of what listens
// where. Before, the transport's own text (connection refused, i/o timeout,
// a TLS record or certificate error) reached the Stack's status.
func TestUnreachableAPIsSayTheSame(t *testing.T) {
	gh := fakegithub.NewApp(t, "4242", "777")
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := refused.Addr().String()
	refused.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	plain := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(plain.Close)
	untrusted := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(untrusted.Close)
	hosts := map[string]string{
		"refused": refusedAddr, "silent": silent.Addr().String(),
		"not TLS": strings.TrimPrefix(plain.URL, "http://"), "untrusted": strings.TrimPrefix(untrusted.URL, "https://"),
	}
	client := gh.Client()
	client.Timeout = 2 * time.Second
	var allowed []string
	for _, h := range hosts {
		allowed = append(allowed, h)
	}
	tokens := &AppTokens{Client: client, APIHosts: allowed}
	said := map[string]string{}
	for what, host := range hosts {
		_, err := tokens.Token(context.Background(), GitHubApp{AppID: "4242", InstallationID: "777", PrivateKey: gh.KeyPEM, APIURL: "https://" + host})
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		said[what] = strings.ReplaceAll(err.Error(), host, "<host>")
		if IsPermanent(err) {
			t.Errorf("%s: %v is permanent; the API may answer later", what, err)
		}
	}
	want := "GitHub App installation token: no answer from https://<host>"
	for what, msg := range said {
		if msg != want {
			t.Errorf("%s: %q, want %q", what, msg, want)
		}
	}
}
