package githubapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/go-github/v60/github"

	"github.com/stackflow-io/stackflow/github-action/report"
)

// Options configure a Client.
type Options struct {
	// Token authenticates (GITHUB_TOKEN or an App installation token).
	Token string
	// APIURL is the REST API root, GITHUB_API_URL: "https://api.github.com"
	// (the default when empty) or, on GitHub Enterprise Server,
	// "https://HOST/api/v3". Used as given (a trailing "/" added).
	APIURL string
	// HTTPClient is the transport; default a client with a 30s timeout.
	HTTPClient *http.Client
	// AppSlug, for a GitHub App installation token, is the app's slug: its
	// comments are by "<slug>[bot]". "github-actions[bot]" (the default
	// GITHUB_TOKEN's identity) is always accepted.
	AppSlug string
	// MaxAttempts bounds UpsertSection's read-modify-write attempts;
	// default 8.
	MaxAttempts int
	// BaseDelay is the first retry's backoff (doubled each attempt, capped
	// at 16×, full jitter); default 500ms.
	BaseDelay time.Duration
	// Settle is how long UpsertSection waits after a confirmed write before
	// checking once more that no concurrent job overwrote it; default 2s.
	// Negative disables the second check.
	Settle time.Duration
}

// Client talks to one GitHub (github.com or a GHES instance).
type Client struct {
	gh   *github.Client
	opts Options

	idMu  sync.Mutex
	known bool
	me    *github.User // nil: GET /user refused (an installation token)
}

// New returns a Client.
func New(o Options) (*Client, error) {
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 8
	}
	if o.BaseDelay <= 0 {
		o.BaseDelay = 500 * time.Millisecond
	}
	if o.Settle == 0 {
		o.Settle = 2 * time.Second
	}
	gh := github.NewClient(o.HTTPClient)
	if o.Token != "" {
		gh = gh.WithAuthToken(o.Token)
	}
	if o.APIURL != "" {
		u, err := url.Parse(o.APIURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, fmt.Errorf("githubapi: bad API URL %q", o.APIURL)
		}
		if !strings.HasSuffix(u.Path, "/") {
			u.Path += "/"
		}
		gh.BaseURL = u
	}
	return &Client{gh: gh, opts: o}, nil
}

// ReadOnlyError is a 403 or 404 on a comment or status write (or the
// comment list): the token may not write there, as with a pull request
// from a fork. Callers warn and carry on.
type ReadOnlyError struct {
	Op         string // "list comments", "create comment", "edit comment", "set status"…
	StatusCode int
	Message    string
}

func (e *ReadOnlyError) Error() string {
	return fmt.Sprintf("githubapi: %s: %d %s: the token cannot write here (a pull request from a fork?)", e.Op, e.StatusCode, e.Message)
}

// BodyTooLongError is GitHub's 422 for a comment body over its limit.
type BodyTooLongError struct {
	Op      string
	Length  int // report.Len of the body sent
	Message string
}

func (e *BodyTooLongError) Error() string {
	return fmt.Sprintf("githubapi: %s: body of %d characters rejected: %s", e.Op, e.Length, e.Message)
}

// classify turns go-github's errors into the typed ones.
func classify(op string, err error, body string) error {
	var er *github.ErrorResponse
	if !errors.As(err, &er) || er.Response == nil {
		return fmt.Errorf("githubapi: %s: %w", op, err)
	}
	switch code := er.Response.StatusCode; {
	case code == http.StatusForbidden || code == http.StatusNotFound:
		return &ReadOnlyError{Op: op, StatusCode: code, Message: er.Message}
	case code == http.StatusUnprocessableEntity && body != "" && tooLong(er):
		msg := er.Message
		for _, e := range er.Errors {
			if e.Message != "" {
				msg = e.Message
			}
		}
		return &BodyTooLongError{Op: op, Length: report.Len(body), Message: msg}
	}
	return fmt.Errorf("githubapi: %s: %w", op, err)
}

func tooLong(er *github.ErrorResponse) bool {
	if strings.Contains(er.Message, "too long") {
		return true
	}
	for _, e := range er.Errors {
		if e.Field == "body" || strings.Contains(e.Message, "too long") {
			return true
		}
	}
	return false
}

func splitRepo(repo string) (string, string, error) {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("githubapi: repository %q is not owner/name", repo)
	}
	return owner, name, nil
}

// States a commit status may have.
var validStates = map[string]bool{"pending": true, "success": true, "failure": true, "error": true}

// SetStatus sets a commit status on sha (the pull request's head commit,
// which the caller passes) under context (e.g. "stackflow/preview: dev/web",
// the name a required check is configured with). state is pending,
// success, failure or error; description is cut to GitHub's 140
// characters.
func (c *Client) SetStatus(ctx context.Context, repo, sha, statusContext, state, description, targetURL string) error {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return err
	}
	if !validStates[state] {
		return fmt.Errorf("githubapi: status state %q is not pending, success, failure or error", state)
	}
	if sha == "" || statusContext == "" {
		return errors.New("githubapi: a status needs a SHA and a context")
	}
	st := &github.RepoStatus{
		State:       github.String(state),
		Context:     github.String(statusContext),
		Description: github.String(report.Truncate(description, 140)),
	}
	if targetURL != "" {
		st.TargetURL = github.String(targetURL)
	}
	if _, _, err := c.gh.Repositories.CreateStatus(ctx, owner, name, sha, st); err != nil {
		return classify("set status", err, "")
	}
	return nil
}

// installationTokenPrefix starts GitHub App installation tokens, the
// workflow's GITHUB_TOKEN included (GitHub documents its token formats:
// ghs_ for server-to-server tokens, ghp_ and github_pat_ for personal
// access tokens, …).
const installationTokenPrefix = "ghs_"

// identity returns the token's user, or nil for an installation token,
// which acts as a bot and has no user: GET /user answers it 403 ("Resource
// not accessible by integration"), so it is not asked. A token of another
// form is asked once; a 403 or 404 is taken as an installation token too
// (older GitHub Enterprise Server tokens have no prefix).
func (c *Client) identity(ctx context.Context) (*github.User, error) {
	c.idMu.Lock()
	defer c.idMu.Unlock()
	if c.known {
		return c.me, nil
	}
	if strings.HasPrefix(c.opts.Token, installationTokenPrefix) {
		c.me, c.known = nil, true
		return nil, nil
	}
	u, _, err := c.gh.Users.Get(ctx, "")
	if err != nil {
		var er *github.ErrorResponse
		if !errors.As(err, &er) || er.Response == nil ||
			(er.Response.StatusCode != http.StatusForbidden && er.Response.StatusCode != http.StatusNotFound) {
			return nil, fmt.Errorf("githubapi: who am I (GET /user): %w", err) // not cached
		}
		u = nil // an installation token: fall back to bot logins
	}
	c.me, c.known = u, true
	return u, nil
}

// ours reports whether a comment is one this client may take as its own:
// it has the top marker and is by the token's user (same id) or, when the
// token has no user (an installation token), by a Bot whose login is
// "github-actions[bot]" or "<AppSlug>[bot]".
func (c *Client) ours(me *github.User, cm *github.IssueComment) bool {
	if !report.IsComment(cm.GetBody()) || cm.User == nil {
		return false
	}
	if me != nil {
		return cm.User.GetID() == me.GetID() && cm.User.GetLogin() == me.GetLogin()
	}
	if cm.User.GetType() != "Bot" {
		return false
	}
	login := cm.User.GetLogin()
	return login == "github-actions[bot]" || (c.opts.AppSlug != "" && login == c.opts.AppSlug+"[bot]")
}

// find lists every comment on the PR (following pagination) and returns
// ours, oldest first.
func (c *Client) find(ctx context.Context, owner, name string, pr int, me *github.User) ([]*github.IssueComment, error) {
	opt := &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100}}
	var found []*github.IssueComment
	for {
		page, resp, err := c.gh.Issues.ListComments(ctx, owner, name, pr, opt)
		if err != nil {
			return nil, classify("list comments", err, "")
		}
		for _, cm := range page {
			if c.ours(me, cm) {
				found = append(found, cm)
			}
		}
		if resp.NextPage == 0 {
			break
		}
		opt.Page = resp.NextPage
	}
	sort.SliceStable(found, func(i, j int) bool {
		ti, tj := found[i].GetCreatedAt().Time, found[j].GetCreatedAt().Time
		if !ti.Equal(tj) {
			return ti.Before(tj)
		}
		return found[i].GetID() < found[j].GetID()
	})
	return found, nil
}

// HasComment reports whether the PR already has the action's comment (one
// this client takes as its own, see UpsertSection).
func (c *Client) HasComment(ctx context.Context, repo string, pr int) (bool, error) {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return false, err
	}
	me, err := c.identity(ctx)
	if err != nil {
		return false, err
	}
	found, err := c.find(ctx, owner, name, pr, me)
	return len(found) > 0, err
}
