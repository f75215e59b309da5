package fakegithub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stackflow-io/stackflow/test/framework/hostproxy"
)

// TestEnterprisePullRequests: git and the pull request API behind one token,
// reached by name through the host proxy as Kargo reaches them; the answers
// Kargo's GitHub provider reads (number, state, merged_at, merge_commit_sha,
// head.sha) and GitHub's refusals.
func TestEnterprisePullRequests(t *testing.T) {
	ctx := context.Background()
	const host, token = "github.example.test", "ghp_test0123456789"
	e, err := Start(Options{GitRoot: t.TempDir(), Host: host})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.AddToken(token, "kargo", false)
	p, err := hostproxy.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Route(host, e.Addr)
	if _, err := e.InitRepo(ctx, "org", "manifests"); err != nil {
		t.Fatal(err)
	}

	// git over HTTP through the proxy, with and without the token.
	work := t.TempDir()
	git := func(pass string, args ...string) error {
		cmd := exec.Command("git", args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "http_proxy="+p.URL, "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.test", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.test")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	remote := strings.Replace(e.CloneURL("org", "manifests"), "http://", "http://kargo:"+token+"@", 1)
	wrong := strings.Replace(e.CloneURL("org", "manifests"), "http://", "http://kargo:nope@", 1)
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"commit", "-q", "--allow-empty", "-m", "one"}, {"push", "-q", remote, "main"},
		{"checkout", "-q", "-b", "promo"}, {"commit", "-q", "--allow-empty", "-m", "two"}, {"push", "-q", remote, "promo"}} {
		if err := git(token, args...); err != nil {
			t.Fatal(err)
		}
	}
	anonymous := e.CloneURL("org", "manifests")
	if err := git("", "ls-remote", wrong); err == nil {
		t.Error("git ls-remote with a wrong token succeeded")
	}
	if err := git("", "ls-remote", anonymous); err == nil {
		t.Error("git ls-remote without a token succeeded on a private repository")
	}
	// Public: anyone fetches; pushing still needs the token.
	e.Public = true
	if err := git("", "ls-remote", anonymous); err != nil {
		t.Errorf("anonymous fetch of a public repository: %v", err)
	}
	if err := git("", "push", "-q", anonymous, "main:anon"); err == nil {
		t.Error("an anonymous push succeeded")
	}
	if err := git("", "push", "-q", wrong, "main:anon"); err == nil {
		t.Error("a push with a wrong token succeeded")
	}
	e.Public = false

	proxyURL, _ := url.Parse(p.URL)
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	api := func(method, path, auth, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+host+"/api/v3"+path, strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out map[string]any
		if strings.HasPrefix(string(b), "{") {
			_ = json.Unmarshal(b, &out)
		} else {
			out = map[string]any{"list": string(b)}
		}
		return resp.StatusCode, out
	}
	bearer := "Bearer " + token
	if st, body := api("GET", "/repos/org/manifests/pulls", "Bearer nope", ""); st != 401 || body["message"] != "Bad credentials" {
		t.Errorf("wrong token: %d %v", st, body)
	}
	if st, _ := api("GET", "/repos/org/other/pulls", bearer, ""); st != 404 {
		t.Errorf("unknown repository: %d", st)
	}
	if st, body := api("POST", "/repos/org/manifests/pulls", bearer, `{"title":"t","head":"main","base":"main"}`); st != 422 {
		t.Errorf("no commits between: %d %v", st, body)
	}
	if st, _ := api("POST", "/repos/org/manifests/pulls", bearer, `{"title":"t","head":"absent","base":"main"}`); st != 422 {
		t.Errorf("missing head: %d", st)
	}
	st, pr := api("POST", "/repos/org/manifests/pulls", "token "+token, `{"title":"Promote","head":"promo","base":"main","body":"why"}`)
	if st != 201 || pr["number"] != float64(1) || pr["state"] != "open" || pr["merged_at"] != nil || pr["html_url"] != "http://"+host+"/org/manifests/pull/1" {
		t.Fatalf("create: %d %v", st, pr)
	}
	if st, _ := api("POST", "/repos/org/manifests/pulls", bearer, `{"title":"again","head":"org:promo","base":"main"}`); st != 422 {
		t.Errorf("a second open pull request for the same head: %d", st)
	}
	if st, body := api("GET", "/repos/org/manifests/pulls?state=open&head=promo&base=main", bearer, ""); st != 200 || !strings.Contains(fmt.Sprint(body["list"]), `"number":1`) {
		t.Errorf("list: %d %v", st, body)
	}
	if st, body := api("GET", "/repos/org/manifests/pulls?state=closed", bearer, ""); st != 200 || strings.Contains(fmt.Sprint(body["list"]), `"number"`) {
		t.Errorf("list closed: %d %v", st, body)
	}
	st, merged := api("PUT", "/repos/org/manifests/pulls/1/merge", bearer, `{}`)
	if st != 200 || merged["merged"] != true {
		t.Fatalf("merge: %d %v", st, merged)
	}
	st, pr = api("GET", "/repos/org/manifests/pulls/1", bearer, "")
	if st != 200 || pr["state"] != "closed" || pr["merged_at"] == nil || pr["merge_commit_sha"] != merged["sha"] {
		t.Errorf("after the merge: %d %v", st, pr)
	}
	main, err := gitCmd(ctx, e.Bare("org", "manifests"), "rev-parse", "main")
	if err != nil || main != merged["sha"] {
		t.Errorf("main is %s (%v), want the merge commit %v", main, err, merged["sha"])
	}
	if parents, _ := gitCmd(ctx, e.Bare("org", "manifests"), "rev-list", "--parents", "-n1", "main"); len(strings.Fields(parents)) != 3 {
		t.Errorf("the merge commit has parents %q, want two", parents)
	}
	if st, _ := api("PUT", "/repos/org/manifests/pulls/1/merge", bearer, `{}`); st != 405 {
		t.Errorf("merging a closed pull request: %d, want 405", st)
	}
}
