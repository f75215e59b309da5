package fakegithub

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

// Enterprise is a faithful local GitHub Enterprise Server for what Kargo's
// git steps need of one: git's smart HTTP at /<owner>/<repo>.git, and the
// REST API v3 under /api/v3 for pull requests:
//
//	POST /api/v3/repos/{owner}/{repo}/pulls                 create (201; 422 as GitHub: missing branch, no commits between, one already open)
//	GET  /api/v3/repos/{owner}/{repo}/pulls                 list (state open|closed|all, head [owner:]branch, base)
//	GET  /api/v3/repos/{owner}/{repo}/pulls/{number}        get
//	PUT  /api/v3/repos/{owner}/{repo}/pulls/{number}/merge  merge (a merge commit; 405 when closed)
//	POST /api/v3/repos/{owner}/{repo}/issues/{number}/labels add labels
//
// Every API request needs the token, as `Authorization: Bearer`/`token` (or
// a basic-auth password); otherwise it answers 401 "Bad credentials". Git
// needs it as a password (basic auth, any user name, as GitHub takes a
// personal access token) to push, and to fetch unless the server's
// repositories are Public; a wrong one is refused even where none is needed,
// as GitHub does. Refused git requests get a Basic challenge. Bodies and
// errors are shaped as GitHub documents them
// (docs.github.com/rest/pulls/pulls).
//
// Kargo reaches it by name: its GitHub provider is chosen for a host
// containing "github" and talks to <scheme>://<host>/api/v3/ (go-github's
// enterprise URLs). Serve it under such a Host through hostproxy.
type Enterprise struct {
	// Host is the name it is reached by (e.g. github.stackflow.test).
	Host string
	// Addr is the loopback address it listens on.
	Addr string
	// Token is the one credential it accepts.
	Token string
	// Public lets anyone fetch (clone) without credentials, as from a
	// public repository; pushes still need the token. Set before use.
	Public bool

	root string
	srv  *http.Server
	git  http.Handler

	mu    sync.Mutex
	pulls map[string][]*pull // "owner/repo" → pull requests, number-1 indexed
}

// pull is a pull request as the server keeps it.
type pull struct {
	Number         int
	Title, Body    string
	Head, Base     string
	HeadSHA        string
	State          string // open, closed
	MergedAt       *time.Time
	MergeCommitSHA string
	Labels         []string
	CreatedAt      time.Time
}

// StartEnterprise serves the bare repositories under root (root/<owner>/<repo>.git)
// as host, on a loopback port, until Close.
func StartEnterprise(root, host, token string) (*Enterprise, error) {
	git, err := gitrepo.Handler(root)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &Enterprise{Host: host, Addr: l.Addr().String(), Token: token, root: root, git: git, pulls: map[string][]*pull{}}
	e.srv = &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.srv.Serve(l) }()
	return e, nil
}

// Close stops serving.
func (e *Enterprise) Close() error { return e.srv.Close() }

// Bare is the bare repository owner/repo on disk (see InitRepo).
func (e *Enterprise) Bare(owner, repo string) string {
	return filepath.Join(e.root, owner, repo+".git")
}

// InitRepo creates the empty bare repository owner/repo with default branch main.
func (e *Enterprise) InitRepo(ctx context.Context, owner, repo string) (string, error) {
	bare := e.Bare(owner, repo)
	if err := os.MkdirAll(filepath.Dir(bare), 0o755); err != nil {
		return "", err
	}
	if _, err := gitCmd(ctx, "", "init", "-q", "--bare", "-b", "main", bare); err != nil {
		return "", err
	}
	// git http-backend serves pushes only to an authenticated REMOTE_USER
	// unless the repository allows them; the server authenticates itself.
	_, err := gitCmd(ctx, bare, "config", "http.receivepack", "true")
	return bare, err
}

// URL is the clone URL of owner/repo as users write it.
func (e *Enterprise) URL(owner, repo string) string {
	return fmt.Sprintf("http://%s/%s/%s.git", e.Host, owner, repo)
}

// PullRequest is a pull request as a test reads it.
type PullRequest struct {
	Number         int
	Title, Body    string
	Head, Base     string
	HeadSHA        string
	Open, Merged   bool
	MergeCommitSHA string
	URL            string
}

// Pulls returns owner/repo's pull requests, oldest first.
func (e *Enterprise) Pulls(owner, repo string) []PullRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []PullRequest
	for _, p := range e.pulls[owner+"/"+repo] {
		out = append(out, PullRequest{Number: p.Number, Title: p.Title, Body: p.Body, Head: p.Head, Base: p.Base, HeadSHA: p.HeadSHA,
			Open: p.State == "open", Merged: p.MergedAt != nil, MergeCommitSHA: p.MergeCommitSHA, URL: e.htmlURL(owner, repo, p.Number)})
	}
	return out
}

// Merge merges pull request number as a reviewer pressing "Merge pull
// request" does: a merge commit of the head into the base branch, pushed to
// it. It returns the merge commit.
func (e *Enterprise) Merge(ctx context.Context, owner, repo string, number int) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.find(owner, repo, number)
	if p == nil {
		return "", fmt.Errorf("no pull request %d in %s/%s", number, owner, repo)
	}
	return e.merge(ctx, owner, repo, p, "")
}

// Close closes pull request number without merging it.
func (e *Enterprise) ClosePull(owner, repo string, number int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.find(owner, repo, number)
	if p == nil {
		return fmt.Errorf("no pull request %d in %s/%s", number, owner, repo)
	}
	p.State = "closed"
	return nil
}

func (e *Enterprise) find(owner, repo string, number int) *pull {
	prs := e.pulls[owner+"/"+repo]
	if number < 1 || number > len(prs) {
		return nil
	}
	return prs[number-1]
}

// merge makes the merge commit in a scratch clone and pushes it to the base
// branch. Called with e.mu held.
func (e *Enterprise) merge(ctx context.Context, owner, repo string, p *pull, method string) (string, error) {
	if p.MergedAt != nil {
		return p.MergeCommitSHA, nil
	}
	if p.State != "open" {
		return "", fmt.Errorf("pull request %d is closed", p.Number)
	}
	if method != "" && method != "merge" {
		return "", fmt.Errorf("%s merges are not allowed on this repository", method)
	}
	dir, err := os.MkdirTemp("", "fakegithub-merge-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	bare := e.Bare(owner, repo)
	steps := [][]string{
		{"clone", "-q", "--branch", p.Base, bare, dir},
		{"-C", dir, "fetch", "-q", "origin", p.Head},
		{"-C", dir, "merge", "-q", "--no-ff", "-m", fmt.Sprintf("Merge pull request #%d from %s/%s\n\n%s", p.Number, owner, p.Head, p.Title), "FETCH_HEAD"},
		{"-C", dir, "push", "-q", "origin", p.Base},
	}
	for _, s := range steps {
		if _, err := gitCmd(ctx, "", s...); err != nil {
			return "", err
		}
	}
	sha, err := gitCmd(ctx, dir, "rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	now := time.Now().UTC()
	p.MergedAt, p.MergeCommitSHA, p.State = &now, sha, "closed"
	return sha, nil
}

func (e *Enterprise) htmlURL(owner, repo string, number int) string {
	return fmt.Sprintf("http://%s/%s/%s/pull/%d", e.Host, owner, repo, number)
}

// authorized accepts the token as a bearer token, GitHub's older "token"
// scheme, or a basic-auth password.
func (e *Enterprise) authorized(r *http.Request) bool {
	if _, pass, ok := r.BasicAuth(); ok {
		return pass == e.Token
	}
	auth := r.Header.Get("Authorization")
	for _, scheme := range []string{"Bearer ", "bearer ", "token "} {
		if tok, ok := strings.CutPrefix(auth, scheme); ok {
			return tok == e.Token
		}
	}
	return false
}

// anonymousFetch is a git request without credentials that only reads:
// the ref advertisement for upload-pack, or upload-pack itself.
func anonymousFetch(r *http.Request) bool {
	if r.Header.Get("Authorization") != "" {
		return false
	}
	if strings.HasSuffix(r.URL.Path, "/info/refs") {
		return r.URL.Query().Get("service") == "git-upload-pack"
	}
	return strings.HasSuffix(r.URL.Path, "/git-upload-pack")
}

var (
	pullsPath = regexp.MustCompile(`^/api/v3/repos/([^/]+)/([^/]+)/pulls$`)
	pullPath  = regexp.MustCompile(`^/api/v3/repos/([^/]+)/([^/]+)/pulls/([0-9]+)(/merge)?$`)
	labelPath = regexp.MustCompile(`^/api/v3/repos/([^/]+)/([^/]+)/issues/([0-9]+)/labels$`)
)

const docPulls = "https://docs.github.com/rest/pulls/pulls"

func (e *Enterprise) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/api/") {
		if !e.authorized(r) && !(e.Public && anonymousFetch(r)) {
			w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		e.git.ServeHTTP(w, r)
		return
	}
	if !e.authorized(r) {
		writeError(w, http.StatusUnauthorized, "Bad credentials", "https://docs.github.com/rest")
		return
	}
	if m := pullsPath.FindStringSubmatch(r.URL.Path); m != nil {
		if !e.repoExists(m[1], m[2]) {
			writeError(w, http.StatusNotFound, "Not Found", docPulls)
			return
		}
		switch r.Method {
		case http.MethodPost:
			e.create(w, r, m[1], m[2])
		case http.MethodGet:
			e.list(w, r, m[1], m[2])
		default:
			writeError(w, http.StatusNotFound, "Not Found", docPulls)
		}
		return
	}
	if m := pullPath.FindStringSubmatch(r.URL.Path); m != nil {
		n, _ := strconv.Atoi(m[3])
		e.mu.Lock()
		defer e.mu.Unlock()
		p := e.find(m[1], m[2], n)
		if p == nil {
			writeError(w, http.StatusNotFound, "Not Found", docPulls)
			return
		}
		switch {
		case m[4] == "" && r.Method == http.MethodGet:
			writeJSON(w, http.StatusOK, e.json(m[1], m[2], p))
		case m[4] != "" && r.Method == http.MethodPut:
			var body struct {
				MergeMethod string `json:"merge_method"`
				SHA         string `json:"sha"`
			}
			_ = json.NewDecoder(r.Body).Decode(&body)
			if body.SHA != "" && body.SHA != p.HeadSHA {
				writeError(w, http.StatusConflict, "Head branch was modified. Review and try the merge again.", docPulls+"#merge-a-pull-request")
				return
			}
			if p.State != "open" {
				writeError(w, http.StatusMethodNotAllowed, "Pull Request is not mergeable", docPulls+"#merge-a-pull-request")
				return
			}
			sha, err := e.merge(r.Context(), m[1], m[2], p, body.MergeMethod)
			if err != nil {
				writeError(w, http.StatusMethodNotAllowed, err.Error(), docPulls+"#merge-a-pull-request")
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"sha": sha, "merged": true, "message": "Pull Request successfully merged"})
		default:
			writeError(w, http.StatusNotFound, "Not Found", docPulls)
		}
		return
	}
	if m := labelPath.FindStringSubmatch(r.URL.Path); m != nil && r.Method == http.MethodPost {
		n, _ := strconv.Atoi(m[3])
		var body struct {
			Labels []string `json:"labels"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeError(w, http.StatusBadRequest, "Problems parsing JSON", "https://docs.github.com/rest/issues/labels")
			return
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		p := e.find(m[1], m[2], n)
		if p == nil {
			writeError(w, http.StatusNotFound, "Not Found", "https://docs.github.com/rest/issues/labels")
			return
		}
		var out []map[string]any
		for _, l := range body.Labels {
			if !slices.Contains(p.Labels, l) {
				p.Labels = append(p.Labels, l)
			}
		}
		for i, l := range p.Labels {
			out = append(out, map[string]any{"id": i + 1, "name": l})
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	writeError(w, http.StatusNotFound, "Not Found", "https://docs.github.com/rest")
}

func (e *Enterprise) repoExists(owner, repo string) bool {
	st, err := os.Stat(e.Bare(owner, repo))
	return err == nil && st.IsDir()
}

// branchSHA is the commit a branch of owner/repo points at ("" when absent).
func (e *Enterprise) branchSHA(ctx context.Context, owner, repo, branch string) string {
	sha, err := gitCmd(ctx, e.Bare(owner, repo), "rev-parse", "--verify", "-q", "refs/heads/"+branch)
	if err != nil {
		return ""
	}
	return sha
}

// headBranch strips the "owner:" GitHub puts before a head branch.
func headBranch(owner, head string) string {
	if o, b, ok := strings.Cut(head, ":"); ok && strings.EqualFold(o, owner) {
		return b
	}
	return head
}

func (e *Enterprise) create(w http.ResponseWriter, r *http.Request, owner, repo string) {
	var body struct {
		Title string `json:"title"`
		Head  string `json:"head"`
		Base  string `json:"base"`
		Body  string `json:"body"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "Problems parsing JSON", docPulls+"#create-a-pull-request")
		return
	}
	head := headBranch(owner, body.Head)
	invalid := func(field, code, msg string) {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed",
			"errors":            []map[string]string{{"resource": "PullRequest", "field": field, "code": code, "message": msg}},
			"documentation_url": docPulls + "#create-a-pull-request", "status": "422"})
	}
	if body.Title == "" {
		invalid("title", "missing_field", "")
		return
	}
	headSHA, baseSHA := e.branchSHA(r.Context(), owner, repo, head), e.branchSHA(r.Context(), owner, repo, body.Base)
	switch {
	case headSHA == "":
		invalid("head", "invalid", "")
		return
	case baseSHA == "":
		invalid("base", "invalid", "")
		return
	}
	if ahead, err := gitCmd(r.Context(), e.Bare(owner, repo), "rev-list", "--count", baseSHA+".."+headSHA); err != nil || ahead == "0" {
		invalid("", "custom", fmt.Sprintf("No commits between %s and %s", body.Base, head))
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.pulls[owner+"/"+repo] {
		if p.State == "open" && p.Head == head && p.Base == body.Base {
			invalid("", "custom", fmt.Sprintf("A pull request already exists for %s:%s.", owner, head))
			return
		}
	}
	key := owner + "/" + repo
	p := &pull{Number: len(e.pulls[key]) + 1, Title: body.Title, Body: body.Body, Head: head, Base: body.Base,
		HeadSHA: headSHA, State: "open", CreatedAt: time.Now().UTC()}
	e.pulls[key] = append(e.pulls[key], p)
	w.Header().Set("Location", fmt.Sprintf("http://%s/api/v3/repos/%s/%s/pulls/%d", e.Host, owner, repo, p.Number))
	writeJSON(w, http.StatusCreated, e.json(owner, repo, p))
}

func (e *Enterprise) list(w http.ResponseWriter, r *http.Request, owner, repo string) {
	q := r.URL.Query()
	state := q.Get("state")
	if state == "" {
		state = "open"
	}
	if state != "open" && state != "closed" && state != "all" {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed",
			"errors": []map[string]string{{"resource": "PullRequest", "field": "state", "code": "invalid"}}, "documentation_url": docPulls + "#list-pull-requests", "status": "422"})
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	out := []map[string]any{}
	for _, p := range e.pulls[owner+"/"+repo] {
		if (state != "all" && p.State != state) ||
			(q.Get("head") != "" && headBranch(owner, q.Get("head")) != p.Head) ||
			(q.Get("base") != "" && q.Get("base") != p.Base) {
			continue
		}
		out = append(out, e.json(owner, repo, p))
	}
	// Newest first, as GitHub's default sort (created, desc).
	slices.Reverse(out)
	writeJSON(w, http.StatusOK, out)
}

// json is a pull request as the REST API returns it (the fields clients
// read; GitHub sends many more).
func (e *Enterprise) json(owner, repo string, p *pull) map[string]any {
	ref := func(branch, sha string) map[string]any {
		return map[string]any{"label": owner + ":" + branch, "ref": branch, "sha": sha,
			"repo": map[string]any{"name": repo, "full_name": owner + "/" + repo, "owner": map[string]any{"login": owner}}}
	}
	labels := []map[string]any{}
	for i, l := range p.Labels {
		labels = append(labels, map[string]any{"id": i + 1, "name": l})
	}
	out := map[string]any{
		"url":        fmt.Sprintf("http://%s/api/v3/repos/%s/%s/pulls/%d", e.Host, owner, repo, p.Number),
		"html_url":   e.htmlURL(owner, repo, p.Number),
		"number":     p.Number,
		"state":      p.State,
		"title":      p.Title,
		"body":       p.Body,
		"labels":     labels,
		"draft":      false,
		"merged":     p.MergedAt != nil,
		"created_at": p.CreatedAt.Format(time.RFC3339),
		"updated_at": p.CreatedAt.Format(time.RFC3339),
		"head":       ref(p.Head, p.HeadSHA),
		"base":       ref(p.Base, ""),
	}
	if p.MergedAt != nil {
		out["merged_at"] = p.MergedAt.Format(time.RFC3339)
		out["closed_at"] = p.MergedAt.Format(time.RFC3339)
		out["merge_commit_sha"] = p.MergeCommitSHA
	} else {
		out["merged_at"] = nil
	}
	if p.State == "open" {
		out["mergeable"], out["mergeable_state"] = true, "clean"
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers as GitHub does: a JSON message and documentation URL.
func writeError(w http.ResponseWriter, status int, msg, doc string) {
	writeJSON(w, status, map[string]string{"message": msg, "documentation_url": doc, "status": fmt.Sprint(status)})
}

// gitCmd runs git in dir and returns its trimmed output.
func gitCmd(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=GitHub", "GIT_AUTHOR_EMAIL=noreply@github.stackflow.test",
		"GIT_COMMITTER_NAME=GitHub", "GIT_COMMITTER_EMAIL=noreply@github.stackflow.test", "GIT_CONFIG_NOSYSTEM=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}
