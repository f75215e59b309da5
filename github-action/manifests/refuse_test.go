package manifests

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

func TestRepoURL(t *testing.T) {
	for _, tt := range []struct {
		raw      string
		loopback bool
		ok       bool
	}{
		{"https://github.com/acme/app.git", false, true},
		{"https://GitHub.com:443/acme/app", false, true},
		{"http://github.com/acme/app.git", false, false},
		{"http://github.com/acme/app.git", true, false}, // not loopback
		{"http://127.0.0.1:8080/app.git", false, false},
		{"http://127.0.0.1:8080/app.git", true, true},
		{"http://[::1]:8080/app.git", true, true},
		{"http://localhost/app.git", true, true},
		{"file:///tmp/app.git", true, false},
		{"ssh://git@github.com/acme/app.git", false, false},
		{"git@github.com:acme/app.git", false, false},
		{"ext::sh -c touch% /tmp/pwned", false, false},
		{"--upload-pack=touch /tmp/pwned", false, false},
		{"https:///no-host", false, false},
		{"https://github.com:99999/x", false, false},
	} {
		_, err := repoURL(tt.raw, tt.loopback)
		if (err == nil) != tt.ok {
			t.Errorf("repoURL(%q, loopback %v) = %v, want ok %v", tt.raw, tt.loopback, err, tt.ok)
		}
	}
}

func TestTokenAllowed(t *testing.T) {
	hosts := []string{"github.com", "ghe.example.com:8443", "127.0.0.1:9000"}
	for _, tt := range []struct {
		raw string
		ok  bool
	}{
		{"https://github.com/acme/app", true},
		{"https://GITHUB.COM:443/acme/app", true},
		{"https://github.com:8443/acme/app", false},
		{"https://github.com.evil.example/acme/app", false},
		{"https://evil.example/github.com/acme/app", false},
		{"https://github.com@evil.example/acme/app", false},
		{"https://ghe.example.com:8443/acme/app", true},
		{"https://ghe.example.com/acme/app", false},
		{"http://127.0.0.1:9000/app.git", true},
		{"http://127.0.0.1:9001/app.git", false},
	} {
		u, err := url.Parse(tt.raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := tokenAllowed(u, hosts); got != tt.ok {
			t.Errorf("tokenAllowed(%s) = %v, want %v", tt.raw, got, tt.ok)
		}
	}
}

func TestCheckBranchAndCommit(t *testing.T) {
	for _, b := range []string{"main", "release/1.2", "refs/heads/feature-x", "a.b_c-d"} {
		if err := checkBranch(b); err != nil {
			t.Errorf("branch %q: %v", b, err)
		}
	}
	for _, b := range []string{"", "-x", "--upload-pack=touch /tmp/x", "a b", "a..b", "a:b", "+main", "a*", "x.lock", ".hidden", "a/", "/a", "a//b", "a@{1}", "a\x00b", "a\tb", "a~1", "a^", "a?", "a[", `a\b`, "@"} {
		if err := checkBranch(b); err == nil {
			t.Errorf("branch %q accepted", b)
		}
	}
	for c, ok := range map[string]bool{
		strings.Repeat("a", 40): true, strings.Repeat("A", 40): false, strings.Repeat("a", 39): false,
		strings.Repeat("a", 64): false, "--upload-pack=touch /tmp/pwned": false, "HEAD": false, "main": false,
	} {
		if IsCommit(c) != ok {
			t.Errorf("commit %q: valid %v", c, !ok)
		}
	}
}

func TestCheckVariable(t *testing.T) {
	backends := []string{"s3://state-bucket/"}
	for name, ok := range map[string]bool{
		"AWS_REGION": true, "TF_LOG": true, "PULUMI_BACKEND_URL": false, "pulumi_access_token": false, "PULUMI_HOME": false,
		"GIT_SSH_COMMAND": false, "HTTPS_PROXY": false, "https_proxy": false, "SSL_CERT_FILE": false, "PATH": false,
		"LD_PRELOAD": false, "HOME": false, "NODE_EXTRA_CA_CERTS": false,
	} {
		if err := checkVariable("envRefs", name, "https://evil.example", backends); (err == nil) != ok {
			t.Errorf("variable %s: %v, want ok %v", name, err, ok)
		}
	}
	if err := checkVariable("envRefs", "PULUMI_BACKEND_URL", "s3://state-bucket", backends); err != nil {
		t.Errorf("an allowed backend: %v", err)
	}
}

// hostile is a Stack manifest naming projectRepo, with spec.
func hostile(t *testing.T, name, spec string) Change {
	t.Helper()
	doc := "apiVersion: pulumi.com/v1\nkind: Stack\nmetadata: {name: " + name + ", namespace: ns}\nspec:\n  stack: " + name + "\n" + spec
	s := tree(t, sha2, map[string]string{"s.yaml": doc}).Stacks["ns/"+name].Stack
	return Change{Key: "ns/" + name, Namespace: "ns", Name: name, File: "s.yaml", Head: s, Added: true, Reasons: []string{"added"}}
}

// recorder is an HTTP listener that records every request's
// Authorization header and answers 404.
type recorder struct {
	*httptest.Server
	mu    sync.Mutex
	auths []string
	n     int
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.n++
		r.auths = append(r.auths, req.Header.Get("Authorization"))
		r.mu.Unlock()
		http.NotFound(w, req)
	}))
	t.Cleanup(r.Close)
	return r
}

// TestHostileManifests: what a pull request puts in a Stack manifest never
// makes the action send the git token to a host the workflow did not list,
// run an option injected through spec.commit, clone over file:// or plain
// http, or point the CLI at a backend of its choice. Each such Stack is
// refused, not previewed, with the reason in one line.
func TestHostileManifests(t *testing.T) {
	const token = "ghs_g1tT0kenOfTheWorkflow"
	evil := newRecorder(t)
	good, srv := gitrepo.NewServedHTTP(t, "app.git", func(user, pass string) bool { return user == "x-access-token" && pass == token })
	sha := good.Commit(t, "v1", map[string]string{"Pulumi.yaml": "name: app\nruntime: yaml\n"})
	marker := filepath.Join(t.TempDir(), "pwned")
	local := gitrepo.New(t)
	local.Commit(t, "v1", map[string]string{"Pulumi.yaml": "name: local\nruntime: yaml\n"})
	o := PlanOptions{GitToken: token, TokenHosts: []string{srv.Addr}, Backends: []string{"s3://allowed"}, AllowLoopbackHTTP: true, TempDir: t.TempDir()}

	for _, tt := range []struct {
		name, spec string
		refused    string // "" when the plan is not refused
	}{
		{"good", "  projectRepo: " + good.HTTPURL(srv) + "\n  commit: " + sha + "\n", ""},
		{"allowed-backend", "  projectRepo: " + good.HTTPURL(srv) + "\n  commit: " + sha + "\n  backend: s3://allowed/\n", ""},
		{"inject", "  projectRepo: " + local.URL() + "\n  commit: \"--upload-pack=touch " + marker + "\"\n", `spec.projectRepo "file://`},
		{"inject-https", "  projectRepo: " + good.HTTPURL(srv) + "\n  commit: \"--upload-pack=touch " + marker + "\"\n",
			`spec.commit "--upload-pack=touch ` + marker[:33]},
		{"inject-branch", "  projectRepo: " + good.HTTPURL(srv) + "\n  branch: \"--upload-pack=touch " + marker + "\"\n", `spec.branch "--upload-pack`},
		{"plain-http", "  projectRepo: http://github.example/acme/app.git\n  commit: " + sha + "\n", "is not an https:// URL"},
		{"backend", "  projectRepo: " + good.HTTPURL(srv) + "\n  commit: " + sha + "\n  backend: " + evil.URL + "\n", `spec.backend "` + evil.URL + `" is not in the action's backends input`},
		{"env-backend", "  projectRepo: " + good.HTTPURL(srv) + "\n  commit: " + sha + "\n  envRefs:\n    PULUMI_BACKEND_URL: {type: Literal, literal: {value: " + evil.URL + "}}\n",
			"envRefs PULUMI_BACKEND_URL " + `"` + evil.URL},
		{"env-proxy", "  projectRepo: " + good.HTTPURL(srv) + "\n  commit: " + sha + "\n  envRefs:\n    HTTPS_PROXY: {type: Literal, literal: {value: " + evil.URL + "}}\n", `envRefs "HTTPS_PROXY"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, cleanup, err := Plan(context.Background(), hostile(t, tt.name, tt.spec), Tree{}, o)
			defer cleanup()
			if tt.refused == "" {
				if err != nil || req.WorkDir == "" {
					t.Fatalf("plan: %v", err)
				}
				return
			}
			if err == nil || req.Err == nil || req.WorkDir != "" {
				t.Fatalf("not refused: %+v", req)
			}
			msg := req.Err.Error()
			if !strings.HasPrefix(msg, "refused, not previewed: ") || !strings.Contains(msg, tt.refused) || strings.Contains(msg, "\n") {
				t.Errorf("error %q, want one line with %q", msg, tt.refused)
			}
			if strings.Contains(req.Source, "commit --uploa") {
				t.Errorf("source %q", req.Source)
			}
		})
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("an option injected through spec.commit ran")
	}

	// A repository on a host not in TokenHosts is cloned without the
	// token: the listener sees git's requests, none with it.
	req, cleanup, err := Plan(context.Background(), hostile(t, "steal", "  projectRepo: "+evil.URL+"/app.git\n  commit: "+sha+"\n"), Tree{}, o)
	cleanup()
	if err == nil || req.Err == nil {
		t.Fatal("a clone from the listener succeeded")
	}
	evil.mu.Lock()
	defer evil.mu.Unlock()
	if evil.n == 0 {
		t.Fatal("git never reached the listener: the test proves nothing")
	}
	for _, a := range evil.auths {
		if a != "" {
			t.Errorf("the listener got Authorization %q", a)
		}
	}
	if strings.Contains(req.Err.Error(), "\n") || strings.Contains(req.Err.Error(), token) || strings.Contains(req.Err.Error(), base64.StdEncoding.EncodeToString([]byte("x-access-token:"+token))) {
		t.Errorf("error %q", req.Err)
	}
}

// FuzzRepoURL: an accepted projectRepo is https (or http to loopback, when
// allowed), has a host, and never starts like an option.
func FuzzRepoURL(f *testing.F) {
	for _, s := range []string{"https://github.com/a/b", "http://127.0.0.1:1/x", "file:///x", "--upload-pack=x", "ext::sh", "git@h:a/b", "https://u:p@h/x"} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, raw string, loopback bool) {
		u, err := repoURL(raw, loopback)
		if err != nil {
			return
		}
		if strings.HasPrefix(raw, "-") || u.Host == "" || !(u.Scheme == "https" || (loopback && u.Scheme == "http" && isLoopback(u.Hostname()))) {
			t.Fatalf("accepted %q: %+v", raw, u)
		}
	})
}

// FuzzCheckBranch: an accepted branch name is never an option, a refspec
// or anything with whitespace or control characters.
func FuzzCheckBranch(f *testing.F) {
	for _, s := range []string{"main", "-x", "a:b", "a b", "refs/heads/x", "a..b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b string) {
		if checkBranch(b) != nil {
			return
		}
		b = strings.TrimPrefix(b, "refs/heads/")
		if b == "" || strings.HasPrefix(b, "-") || strings.ContainsAny(b, ": \t\n\r\x00*?[\\^~") || strings.Contains(b, "..") {
			t.Fatalf("accepted %q", b)
		}
	})
}
