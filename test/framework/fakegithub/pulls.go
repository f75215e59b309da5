package fakegithub

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The git hosting and pull request API of a GitHub Enterprise Server
// (Options.GitRoot), for what Kargo's git steps need of one: git's smart
// HTTP at /<owner>/<repo>.git, and under /api/v3:
//
//	POST /repos/{owner}/{repo}/pulls                 create (201; 422 as GitHub: missing branch, no commits between, one already open)
//	GET  /repos/{owner}/{repo}/pulls                 list (state open|closed|all, head [owner:]branch, base)
//	GET  /repos/{owner}/{repo}/pulls/{number}        get
//	PUT  /repos/{owner}/{repo}/pulls/{number}/merge  merge (a merge commit; 405 when closed)
//	POST /repos/{owner}/{repo}/issues/{number}/labels add labels
//
// Git needs a token as a password (basic auth, any user name, as GitHub
// takes a personal access token) to push, and to fetch unless the server is
// Public; a wrong one is refused even where none is needed, as GitHub does.
// Refused git requests get a Basic challenge. Bodies and errors are shaped
// as GitHub documents them (docs.github.com/rest/pulls/pulls).
//
// Kargo reaches it by name: its GitHub provider is chosen for a host
// containing "github" and talks to <scheme>://<host>/api/v3/ (go-github's
// enterprise URLs). Serve it under such a Host through hostproxy.

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

const docPulls = "https://docs.github.com/rest/pulls/pulls"

// Bare is the bare repository owner/repo on disk (see InitRepo).
func (s *Server) Bare(owner, repo string) string {
	return filepath.Join(s.o.GitRoot, owner, repo+".git")
}

// InitRepo creates the empty bare repository owner/repo with default branch main.
func (s *Server) InitRepo(ctx context.Context, owner, repo string) (string, error) {
	if s.git == nil {
		return "", fmt.Errorf("the fake GitHub hosts no repositories (Options.GitRoot)")
	}
	bare := s.Bare(owner, repo)
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

// CloneURL is the clone URL of owner/repo as users write it.
func (s *Server) CloneURL(owner, repo string) string {
	return s.webURL(fmt.Sprintf("/%s/%s.git", owner, repo))
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
func (s *Server) Pulls(owner, repo string) []PullRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []PullRequest
	for _, p := range s.pulls[owner+"/"+repo] {
		out = append(out, PullRequest{Number: p.Number, Title: p.Title, Body: p.Body, Head: p.Head, Base: p.Base, HeadSHA: p.HeadSHA,
			Open: p.State == "open", Merged: p.MergedAt != nil, MergeCommitSHA: p.MergeCommitSHA, URL: s.htmlURL(owner, repo, p.Number)})
	}
	return out
}

// Merge merges pull request number as a reviewer pressing "Merge pull
// request" does: a merge commit of the head into the base branch, pushed to
// it. It returns the merge commit.
func (s *Server) Merge(ctx context.Context, owner, repo string, number int) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.findPull(owner, repo, number)
	if p == nil {
		return "", fmt.Errorf("no pull request %d in %s/%s", number, owner, repo)
	}
	return s.merge(ctx, owner, repo, p, "")
}

// ClosePull closes pull request number without merging it.
func (s *Server) ClosePull(owner, repo string, number int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.findPull(owner, repo, number)
	if p == nil {
		return fmt.Errorf("no pull request %d in %s/%s", number, owner, repo)
	}
	p.State = "closed"
	return nil
}

// findPull is pull request number of owner/repo, or nil (caller holds mu).
func (s *Server) findPull(owner, repo string, number int) *pull {
	prs := s.pulls[owner+"/"+repo]
	if number < 1 || number > len(prs) {
		return nil
	}
	return prs[number-1]
}

// merge makes the merge commit in a scratch clone and pushes it to the base
// branch. Called with s.mu held.
func (s *Server) merge(ctx context.Context, owner, repo string, p *pull, method string) (string, error) {
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
	bare := s.Bare(owner, repo)
	steps := [][]string{
		{"clone", "-q", "--branch", p.Base, bare, dir},
		{"-C", dir, "fetch", "-q", "origin", p.Head},
		{"-C", dir, "merge", "-q", "--no-ff", "-m", fmt.Sprintf("Merge pull request #%d from %s/%s\n\n%s", p.Number, owner, p.Head, p.Title), "FETCH_HEAD"},
		{"-C", dir, "push", "-q", "origin", p.Base},
	}
	for _, st := range steps {
		if _, err := gitCmd(ctx, "", st...); err != nil {
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

func (s *Server) htmlURL(owner, repo string, number int) string {
	return s.webURL(fmt.Sprintf("/%s/%s/pull/%d", owner, repo, number))
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

// serveGit serves the hosted repositories to a known token, or to anyone
// fetching when Public.
func (s *Server) serveGit(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.auth(r); !ok && !(s.Public && anonymousFetch(r)) {
		w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
		http.Error(w, "authentication required", http.StatusUnauthorized)
		return
	}
	s.git.ServeHTTP(w, r)
}

// pullRoute checks what every pull request route needs: hosted repository
// owner/repo exists and, for writes, a token that may write.
func (s *Server) pullRoute(w http.ResponseWriter, r *http.Request, write bool) (owner, repo string, ok bool) {
	owner, repo = r.PathValue("owner"), r.PathValue("repo")
	if !s.repoExists(owner, repo) {
		writeError(w, http.StatusNotFound, "Not Found", docPulls)
		return "", "", false
	}
	if tok, _ := s.auth(r); write && tok.readOnly {
		writeError(w, http.StatusForbidden, "Resource not accessible by integration", docPulls)
		return "", "", false
	}
	return owner, repo, true
}

func (s *Server) repoExists(owner, repo string) bool {
	if s.git == nil {
		return false
	}
	st, err := os.Stat(s.Bare(owner, repo))
	return err == nil && st.IsDir()
}

// branchSHA is the commit a branch of owner/repo points at ("" when absent).
func (s *Server) branchSHA(ctx context.Context, owner, repo, branch string) string {
	sha, err := gitCmd(ctx, s.Bare(owner, repo), "rev-parse", "--verify", "-q", "refs/heads/"+branch)
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

func (s *Server) createPull(w http.ResponseWriter, r *http.Request) {
	owner, repo, ok := s.pullRoute(w, r, true)
	if !ok {
		return
	}
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
		validationFailed(w, "PullRequest", field, code, msg, docPulls+"#create-a-pull-request")
	}
	if body.Title == "" {
		invalid("title", "missing_field", "")
		return
	}
	headSHA, baseSHA := s.branchSHA(r.Context(), owner, repo, head), s.branchSHA(r.Context(), owner, repo, body.Base)
	switch {
	case headSHA == "":
		invalid("head", "invalid", "")
		return
	case baseSHA == "":
		invalid("base", "invalid", "")
		return
	}
	if ahead, err := gitCmd(r.Context(), s.Bare(owner, repo), "rev-list", "--count", baseSHA+".."+headSHA); err != nil || ahead == "0" {
		invalid("", "custom", fmt.Sprintf("No commits between %s and %s", body.Base, head))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pulls[owner+"/"+repo] {
		if p.State == "open" && p.Head == head && p.Base == body.Base {
			invalid("", "custom", fmt.Sprintf("A pull request already exists for %s:%s.", owner, head))
			return
		}
	}
	key := owner + "/" + repo
	p := &pull{Number: len(s.pulls[key]) + 1, Title: body.Title, Body: body.Body, Head: head, Base: body.Base,
		HeadSHA: headSHA, State: "open", CreatedAt: time.Now().UTC()}
	s.pulls[key] = append(s.pulls[key], p)
	out := s.pullJSON(r, owner, repo, p)
	w.Header().Set("Location", out["url"].(string))
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) listPulls(w http.ResponseWriter, r *http.Request) {
	owner, repo, ok := s.pullRoute(w, r, false)
	if !ok {
		return
	}
	q := r.URL.Query()
	state := q.Get("state")
	if state == "" {
		state = "open"
	}
	if state != "open" && state != "closed" && state != "all" {
		validationFailed(w, "PullRequest", "state", "invalid", "", docPulls+"#list-pull-requests")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []map[string]any{}
	for _, p := range s.pulls[owner+"/"+repo] {
		if (state != "all" && p.State != state) ||
			(q.Get("head") != "" && headBranch(owner, q.Get("head")) != p.Head) ||
			(q.Get("base") != "" && q.Get("base") != p.Base) {
			continue
		}
		out = append(out, s.pullJSON(r, owner, repo, p))
	}
	// Newest first, as GitHub's default sort (created, desc).
	slices.Reverse(out)
	writeJSON(w, http.StatusOK, out)
}

// routedPull is the pull request of the route (caller holds mu), or nil
// after answering 404.
func (s *Server) routedPull(w http.ResponseWriter, r *http.Request, owner, repo, doc string) *pull {
	n, err := strconv.Atoi(r.PathValue("number"))
	var p *pull
	if err == nil {
		p = s.findPull(owner, repo, n)
	}
	if p == nil {
		writeError(w, http.StatusNotFound, "Not Found", doc)
	}
	return p
}

func (s *Server) getPull(w http.ResponseWriter, r *http.Request) {
	owner, repo, ok := s.pullRoute(w, r, false)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.routedPull(w, r, owner, repo, docPulls); p != nil {
		writeJSON(w, http.StatusOK, s.pullJSON(r, owner, repo, p))
	}
}

func (s *Server) mergePull(w http.ResponseWriter, r *http.Request) {
	owner, repo, ok := s.pullRoute(w, r, true)
	if !ok {
		return
	}
	const doc = docPulls + "#merge-a-pull-request"
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.routedPull(w, r, owner, repo, doc)
	if p == nil {
		return
	}
	var body struct {
		MergeMethod string `json:"merge_method"`
		SHA         string `json:"sha"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	if body.SHA != "" && body.SHA != p.HeadSHA {
		writeError(w, http.StatusConflict, "Head branch was modified. Review and try the merge again.", doc)
		return
	}
	if p.State != "open" {
		writeError(w, http.StatusMethodNotAllowed, "Pull Request is not mergeable", doc)
		return
	}
	sha, err := s.merge(r.Context(), owner, repo, p, body.MergeMethod)
	if err != nil {
		writeError(w, http.StatusMethodNotAllowed, err.Error(), doc)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"sha": sha, "merged": true, "message": "Pull Request successfully merged"})
}

func (s *Server) addLabels(w http.ResponseWriter, r *http.Request) {
	const doc = "https://docs.github.com/rest/issues/labels"
	owner, repo, ok := s.pullRoute(w, r, true)
	if !ok {
		return
	}
	var body struct {
		Labels []string `json:"labels"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "Problems parsing JSON", doc)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.routedPull(w, r, owner, repo, doc)
	if p == nil {
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
}

// pullJSON is a pull request as the REST API returns it (the fields clients
// read; GitHub sends many more).
func (s *Server) pullJSON(r *http.Request, owner, repo string, p *pull) map[string]any {
	ref := func(branch, sha string) map[string]any {
		return map[string]any{"label": owner + ":" + branch, "ref": branch, "sha": sha,
			"repo": map[string]any{"name": repo, "full_name": owner + "/" + repo, "owner": map[string]any{"login": owner}}}
	}
	labels := []map[string]any{}
	for i, l := range p.Labels {
		labels = append(labels, map[string]any{"id": i + 1, "name": l})
	}
	out := map[string]any{
		"url":        fmt.Sprintf("%s/repos/%s/%s/pulls/%d", s.apiBase(r), owner, repo, p.Number),
		"html_url":   s.htmlURL(owner, repo, p.Number),
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
