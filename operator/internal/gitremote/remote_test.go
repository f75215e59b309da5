package gitremote_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
	"github.com/stackflow-io/stackflow/operator/internal/gitremote"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/hostile"
)

func TestMain(m *testing.M) {
	// The HTTPS servers' CA, trusted before anything loads the system roots.
	os.Setenv("SSL_CERT_FILE", hostile.CAFile(&testing.T{}))
	os.Exit(m.Run())
}

// limits are short enough for a test, with the drip (a byte a second)
// inside the idle timeout, so that only the whole-operation timeout ends it.
var limits = gitremote.Limits{Timeout: 4 * time.Second, IdleTimeout: 1500 * time.Millisecond, MaxBytes: 1 << 20,
	TimeoutFlag: "--git-timeout", IdleFlag: "--git-idle-timeout", BytesFlag: "--git-max-listing-bytes"}

// wantLimit is the limit each misbehaviour must run into.
var wantLimit = map[hostile.Behaviour]string{
	hostile.Silent: gitremote.LimitIdle, hostile.Drip: gitremote.LimitTime, hostile.EndlessRefs: gitremote.LimitBytes,
}

func sshAuth(t *testing.T, knownHosts string) transport.AuthMethod {
	t.Helper()
	key := gitrepo.NewSSHKey(t)
	m, err := gitauth.Credentials{SSHPrivateKey: key.PrivateKey, KnownHosts: knownHosts}.Method(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestHostileServers: a listing of a server that never answers, answers a
// byte a second, or advertises references for ever ends within its limits
// over SSH, HTTP and HTTPS, with an error naming the server and the limit.
// Before, go-git's SSH transport dialled and handshook without any deadline
// (the listing hung for as long as the server held the connection) and
// nothing bounded what a listing read.
func TestHostileServers(t *testing.T) {
	for _, proto := range []string{"ssh", "http", "https"} {
		for _, b := range hostile.Behaviours {
			t.Run(proto+"/"+string(b), func(t *testing.T) {
				t.Parallel()
				var srv *hostile.Server
				var auth transport.AuthMethod
				switch proto {
				case "ssh":
					srv = hostile.SSH(t, b)
					auth = sshAuth(t, srv.KnownHosts)
				default:
					srv = hostile.HTTP(t, b, proto == "https")
				}
				start := time.Now()
				_, err := gitremote.List(context.Background(), srv.URL, auth, limits)
				took := time.Since(start)
				t.Logf("%s: %v after %s", srv.URL, err, took.Round(time.Millisecond))
				var le *gitremote.LimitError
				if !errors.As(err, &le) {
					t.Fatalf("want a LimitError, got %T %v", err, err)
				}
				if le.Limit != wantLimit[b] {
					t.Errorf("limit %q, want %q", le.Limit, wantLimit[b])
				}
				if !strings.Contains(err.Error(), srv.Addr) {
					t.Errorf("%q does not name the server %s", err, srv.Addr)
				}
				// Bounded: the whole-operation timeout, plus the moment it
				// takes to close the connections (a hang would be minutes).
				if took > limits.Timeout+2*time.Second {
					t.Errorf("took %s, past the %s limit", took, limits.Timeout)
				}
			})
		}
	}
}

// TestHostileFetch: a fetch is held to the same limits as a listing.
func TestHostileFetch(t *testing.T) {
	srv := hostile.SSH(t, hostile.Silent)
	auth := sshAuth(t, srv.KnownHosts)
	repo := newRepo(t, srv.URL)
	err := gitremote.Fetch(context.Background(), repo, srv.URL, fetchAll(auth), limits)
	var le *gitremote.LimitError
	if !errors.As(err, &le) || le.Limit != gitremote.LimitIdle {
		t.Fatalf("want the idle limit, got %v", err)
	}
}

// TestCallerCancels: the caller's context ending ends an SSH handshake that
// would otherwise wait for ever.
func TestCallerCancels(t *testing.T) {
	srv := hostile.SSH(t, hostile.Silent)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	_, err := gitremote.List(ctx, srv.URL, sshAuth(t, srv.KnownHosts), gitremote.Limits{IdleTimeout: time.Hour})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
}

// TestServersThatAnswer: real git servers over SSH, HTTP and a local path are
// listed and fetched through the bounded transports.
func TestServersThatAnswer(t *testing.T) {
	root := t.TempDir()
	r := gitrepo.NewIn(t, root, "app")
	sha := r.Commit(t, "first", map[string]string{"Pulumi.yaml": "name: app\nruntime: yaml\n"})
	h := gitrepo.NewHTTPServer(t, root)
	h.Start(t)
	key := gitrepo.NewSSHKey(t)
	s := gitrepo.NewSSHServer(t, root, key.Public)
	sshM, err := gitauth.Credentials{SSHPrivateKey: key.PrivateKey, KnownHosts: s.KnownHosts()}.Method(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		url  string
		auth transport.AuthMethod
	}{{r.HTTPURL(h), nil}, {r.SSHURL(s), sshM}, {r.URL(), nil}} {
		refs, err := gitremote.List(context.Background(), c.url, c.auth, limits)
		if err != nil {
			t.Fatalf("%s: %v", c.url, err)
		}
		found := false
		for _, ref := range refs {
			found = found || ref.Hash().String() == sha
		}
		if !found {
			t.Errorf("%s: %s not listed in %v", c.url, sha, refs)
		}
		if err := gitremote.Fetch(context.Background(), newRepo(t, c.url), c.url, fetchAll(c.auth), limits); err != nil {
			t.Errorf("fetch %s: %v", c.url, err)
		}
	}
}

// TestRefusedSchemes: git:// cannot be bounded (go-git dials it with no
// hook) and is refused with the way out; the error never repeats the URL.
func TestRefusedSchemes(t *testing.T) {
	for _, url := range []string{"git://user:hunter2hunter2@example.com/repo.git", "ftp://user:hunter2hunter2@example.com/r"} {
		_, err := gitremote.List(context.Background(), url, nil, limits)
		if !errors.Is(err, gitremote.ErrUnsupportedScheme) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: %v", url, err)
		}
	}
}

// newRepo is an empty repository whose remote origin is url.
func newRepo(t *testing.T, url string) *git.Repository {
	t.Helper()
	repo, err := git.PlainInit(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.CreateRemote(&gitconfig.RemoteConfig{Name: "origin", URLs: []string{url}}); err != nil {
		t.Fatal(err)
	}
	return repo
}

func fetchAll(auth transport.AuthMethod) *git.FetchOptions {
	return &git.FetchOptions{RemoteName: "origin", Auth: auth, RefSpecs: []gitconfig.RefSpec{"+refs/heads/*:refs/remotes/origin/*"}}
}

func TestHost(t *testing.T) {
	for url, want := range map[string]string{
		"https://user:tok@github.com/o/r.git": "github.com:443",
		"ssh://git@10.0.0.5:2222/r.git":       "10.0.0.5:2222",
		"git@github.com:o/r.git":              "github.com:22",
		"http://[::1]:8080/r":                 "[::1]:8080",
		"file:///srv/git/r":                   "local",
	} {
		if got := gitremote.Host(url); got != want {
			t.Errorf("Host(%q) = %q, want %q", url, got, want)
		}
	}
}
