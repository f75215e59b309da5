package githubtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

type prefixKey struct{}

// MaxBody is GitHub's limit on a comment body, in characters.
const MaxBody = 65536

// GitHub's limits on a commit status, in characters: the description (as
// documented) and the context (as enforced: 422 beyond it).
const (
	MaxStatusDescription = 140
	MaxStatusContext     = 255
)

// User is an account the server knows.
type User struct {
	Login string `json:"login"`
	ID    int64  `json:"id"`
	Type  string `json:"type"` // "User" or "Bot"
}

// Comment is an issue comment as the server stores it.
type Comment struct {
	ID        int64
	Owner     string
	Repo      string
	Issue     int
	User      User
	Body      string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Status is a commit status as the server stores it.
type Status struct {
	Owner, Repo, SHA string
	State            string
	Context          string
	Description      string
	TargetURL        string
	Creator          User
}

type token struct {
	user     User
	readOnly bool
	app      bool // an installation token: GET /user is 403
}

// Server is the fake GitHub. Start one with New; it is closed by the
// test's cleanup.
type Server struct {
	*httptest.Server

	mu       sync.Mutex
	tokens   map[string]token
	comments []*Comment
	statuses []Status
	nextID   int64
	clock    time.Time
	latency  time.Duration
	maxBody  int
	requests []string
	bodies   []int // lengths (characters) of comment bodies received
}

// New starts a server and registers its Close with t.Cleanup.
func New(t interface{ Cleanup(func()) }) *Server {
	s := &Server{
		tokens:  map[string]token{},
		nextID:  1000,
		clock:   time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		maxBody: MaxBody,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /user", s.getUser)
	// GET .../issues/{number}/comments and GET .../issues/comments/{id}
	// overlap as patterns; one route tells them apart.
	mux.HandleFunc("GET /repos/{owner}/{repo}/issues/{a}/{b}", func(w http.ResponseWriter, r *http.Request) {
		switch a, b := r.PathValue("a"), r.PathValue("b"); {
		case a == "comments":
			r.SetPathValue("id", b)
			s.getComment(w, r)
		case b == "comments":
			r.SetPathValue("number", a)
			s.listComments(w, r)
		default:
			writeError(w, http.StatusNotFound, "Not Found")
		}
	})
	mux.HandleFunc("POST /repos/{owner}/{repo}/issues/{number}/comments", s.createComment)
	mux.HandleFunc("PATCH /repos/{owner}/{repo}/issues/comments/{id}", s.editComment)
	mux.HandleFunc("DELETE /repos/{owner}/{repo}/issues/comments/{id}", s.deleteComment)
	mux.HandleFunc("POST /repos/{owner}/{repo}/statuses/{sha}", s.createStatus)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.Method+" "+r.URL.RequestURI())
		lat := s.latency
		s.mu.Unlock()
		if lat > 0 {
			time.Sleep(lat)
		}
		if p, ok := strings.CutPrefix(r.URL.Path, "/api/v3/"); ok {
			r2 := r.Clone(context.WithValue(r.Context(), prefixKey{}, "/api/v3"))
			r2.URL.Path = "/" + p
			r2.URL.RawPath = ""
			r = r2
		}
		if _, ok := s.auth(r); !ok {
			writeError(w, http.StatusUnauthorized, "Bad credentials")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// BaseURL is the API root as GITHUB_API_URL has it on github.com-like
// layout ("http://127.0.0.1:port"); EnterpriseURL the GHES layout.
func (s *Server) BaseURL() string       { return s.URL }
func (s *Server) EnterpriseURL() string { return s.URL + "/api/v3" }

// AddToken registers a personal/user token authenticating as login.
func (s *Server) AddToken(tok, login string, readOnly bool) User {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := User{Login: login, ID: s.userID(login), Type: "User"}
	s.tokens[tok] = token{user: u, readOnly: readOnly}
	return u
}

// AddAppToken registers a GitHub App installation token, as the workflow's
// GITHUB_TOKEN is: GET /user answers 403 "Resource not accessible by
// integration" and comments are authored by botLogin (e.g.
// "github-actions[bot]"), a Bot. GitHub's installation tokens start with
// "ghs_"; tests pass another form to play an older GitHub Enterprise
// Server's.
func (s *Server) AddAppToken(tok, botLogin string, readOnly bool) User {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := User{Login: botLogin, ID: s.userID(botLogin), Type: "Bot"}
	s.tokens[tok] = token{user: u, readOnly: readOnly, app: true}
	return u
}

func (s *Server) userID(login string) int64 {
	var h int64 = 7
	for _, c := range login {
		h = (h*31 + int64(c)) % 1_000_000_007
	}
	return h
}

// SetLatency delays every request by d (before it is handled), so that
// concurrent clients' read-modify-writes overlap.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	s.latency = d
	s.mu.Unlock()
}

// SetMaxBody lowers the body limit (to provoke a 422 from a client that
// truncates to the real limit).
func (s *Server) SetMaxBody(n int) {
	s.mu.Lock()
	s.maxBody = n
	s.mu.Unlock()
}

// Seed adds a comment by user on owner/repo#issue, as if written earlier.
func (s *Server) Seed(owner, repo string, issue int, user User, body string) *Comment {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.add(owner, repo, issue, user, body)
}

func (s *Server) add(owner, repo string, issue int, user User, body string) *Comment {
	s.nextID++
	s.clock = s.clock.Add(time.Second)
	c := &Comment{ID: s.nextID, Owner: owner, Repo: repo, Issue: issue, User: user, Body: body, CreatedAt: s.clock, UpdatedAt: s.clock}
	s.comments = append(s.comments, c)
	return c
}

// Comments returns copies of the comments on owner/repo#issue, oldest first.
func (s *Server) Comments(owner, repo string, issue int) []Comment {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Comment
	for _, c := range s.comments {
		if c.Owner == owner && c.Repo == repo && c.Issue == issue {
			out = append(out, *c)
		}
	}
	return out
}

// Statuses returns the statuses created on sha, in order.
func (s *Server) Statuses(owner, repo, sha string) []Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Status
	for _, st := range s.statuses {
		if st.Owner == owner && st.Repo == repo && st.SHA == sha {
			out = append(out, st)
		}
	}
	return out
}

// Requests returns "METHOD /uri" of every request received.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string{}, s.requests...)
}

// BodyLengths returns the length in characters of every comment body
// received by create or edit, including rejected ones.
func (s *Server) BodyLengths() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int{}, s.bodies...)
}

func (s *Server) auth(r *http.Request) (token, bool) {
	h := r.Header.Get("Authorization")
	var t string
	if v, ok := strings.CutPrefix(h, "Bearer "); ok {
		t = v
	} else if v, ok := strings.CutPrefix(h, "token "); ok {
		t = v
	} else {
		return token{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tok, ok := s.tokens[t]
	return tok, ok
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"message": msg, "documentation_url": "https://docs.github.com/rest"})
}

func (s *Server) getUser(w http.ResponseWriter, r *http.Request) {
	tok, _ := s.auth(r)
	if tok.app {
		writeError(w, http.StatusForbidden, "Resource not accessible by integration")
		return
	}
	writeJSON(w, http.StatusOK, tok.user)
}

type apiComment struct {
	ID                int64  `json:"id"`
	NodeID            string `json:"node_id"`
	URL               string `json:"url"`
	HTMLURL           string `json:"html_url"`
	IssueURL          string `json:"issue_url"`
	Body              string `json:"body"`
	User              User   `json:"user"`
	CreatedAt         string `json:"created_at"`
	UpdatedAt         string `json:"updated_at"`
	AuthorAssociation string `json:"author_association"`
}

func (s *Server) api(r *http.Request, c *Comment) apiComment {
	prefix, _ := r.Context().Value(prefixKey{}).(string)
	base := "http://" + r.Host + prefix
	return apiComment{
		ID:                c.ID,
		NodeID:            fmt.Sprintf("IC_%d", c.ID),
		URL:               fmt.Sprintf("%s/repos/%s/%s/issues/comments/%d", base, c.Owner, c.Repo, c.ID),
		HTMLURL:           fmt.Sprintf("https://github.test/%s/%s/pull/%d#issuecomment-%d", c.Owner, c.Repo, c.Issue, c.ID),
		IssueURL:          fmt.Sprintf("%s/repos/%s/%s/issues/%d", base, c.Owner, c.Repo, c.Issue),
		Body:              c.Body,
		User:              c.User,
		CreatedAt:         c.CreatedAt.Format(time.RFC3339),
		UpdatedAt:         c.UpdatedAt.Format(time.RFC3339),
		AuthorAssociation: "MEMBER",
	}
}

func intParam(q url.Values, name string, def, lo, hi int) int {
	n, err := strconv.Atoi(q.Get(name))
	if err != nil {
		return def
	}
	return max(lo, min(hi, n))
}

func (s *Server) listComments(w http.ResponseWriter, r *http.Request) {
	owner, repo := r.PathValue("owner"), r.PathValue("repo")
	issue, err := strconv.Atoi(r.PathValue("number"))
	if err != nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	q := r.URL.Query()
	perPage := intParam(q, "per_page", 30, 1, 100)
	page := intParam(q, "page", 1, 1, 1<<30)
	s.mu.Lock()
	var all []apiComment
	for _, c := range s.comments {
		if c.Owner == owner && c.Repo == repo && c.Issue == issue {
			all = append(all, s.api(r, c))
		}
	}
	s.mu.Unlock()
	sort.SliceStable(all, func(i, j int) bool { return all[i].ID < all[j].ID })
	last := max(1, (len(all)+perPage-1)/perPage)
	from, to := min(len(all), (page-1)*perPage), min(len(all), page*perPage)
	link := func(p int, rel string) string {
		prefix, _ := r.Context().Value(prefixKey{}).(string)
		u := url.URL{Scheme: "http", Host: r.Host, Path: prefix + r.URL.Path}
		v := url.Values{}
		v.Set("per_page", strconv.Itoa(perPage))
		v.Set("page", strconv.Itoa(p))
		u.RawQuery = v.Encode()
		return fmt.Sprintf("<%s>; rel=%q", u.String(), rel)
	}
	var links []string
	if page > 1 {
		links = append(links, link(page-1, "prev"), link(1, "first"))
	}
	if page < last {
		links = append(links, link(page+1, "next"), link(last, "last"))
	}
	if len(links) > 0 {
		w.Header().Set("Link", strings.Join(links, ", "))
	}
	writeJSON(w, http.StatusOK, append([]apiComment{}, all[from:to]...))
}

func (s *Server) readBody(w http.ResponseWriter, r *http.Request, tok token) (string, bool) {
	var in struct {
		Body *string `json:"body"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Body == nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Invalid request.\n\n\"body\" wasn't supplied."})
		return "", false
	}
	n := utf8.RuneCountInString(*in.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, n)
	limit := s.maxBody
	s.mu.Unlock()
	if tok.readOnly {
		writeError(w, http.StatusForbidden, "Resource not accessible by integration")
		return "", false
	}
	if n > limit {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{
			"message": "Validation Failed",
			"errors": []map[string]string{{
				"resource": "IssueComment", "code": "custom", "field": "body",
				"message": fmt.Sprintf("body is too long (maximum is %d characters)", limit),
			}},
			"documentation_url": "https://docs.github.com/rest/issues/comments#create-an-issue-comment",
		})
		return "", false
	}
	return *in.Body, true
}

func (s *Server) createComment(w http.ResponseWriter, r *http.Request) {
	tok, _ := s.auth(r)
	issue, err := strconv.Atoi(r.PathValue("number"))
	if err != nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	body, ok := s.readBody(w, r, tok)
	if !ok {
		return
	}
	s.mu.Lock()
	c := s.add(r.PathValue("owner"), r.PathValue("repo"), issue, tok.user, body)
	out := s.api(r, c)
	s.mu.Unlock()
	w.Header().Set("Location", out.URL)
	writeJSON(w, http.StatusCreated, out)
}

// find returns the comment of the route's owner/repo/id (caller holds mu).
func (s *Server) find(r *http.Request) (int, *Comment) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		return -1, nil
	}
	for i, c := range s.comments {
		if c.ID == id && c.Owner == r.PathValue("owner") && c.Repo == r.PathValue("repo") {
			return i, c
		}
	}
	return -1, nil
}

func (s *Server) getComment(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	_, c := s.find(r)
	var out apiComment
	if c != nil {
		out = s.api(r, c)
	}
	s.mu.Unlock()
	if c == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) editComment(w http.ResponseWriter, r *http.Request) {
	tok, _ := s.auth(r)
	s.mu.Lock()
	_, c := s.find(r)
	s.mu.Unlock()
	if c == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	body, ok := s.readBody(w, r, tok)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.User.ID != tok.user.ID {
		writeError(w, http.StatusForbidden, "Resource not accessible by integration")
		return
	}
	s.clock = s.clock.Add(time.Second)
	c.Body, c.UpdatedAt = body, s.clock
	writeJSON(w, http.StatusOK, s.api(r, c))
}

func (s *Server) deleteComment(w http.ResponseWriter, r *http.Request) {
	tok, _ := s.auth(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	i, c := s.find(r)
	switch {
	case c == nil:
		writeError(w, http.StatusNotFound, "Not Found")
	case tok.readOnly || c.User.ID != tok.user.ID:
		writeError(w, http.StatusForbidden, "Resource not accessible by integration")
	default:
		s.comments = append(s.comments[:i], s.comments[i+1:]...)
		w.WriteHeader(http.StatusNoContent)
	}
}

var states = map[string]bool{"pending": true, "success": true, "failure": true, "error": true}

func (s *Server) createStatus(w http.ResponseWriter, r *http.Request) {
	tok, _ := s.auth(r)
	var in struct {
		State       string `json:"state"`
		TargetURL   string `json:"target_url"`
		Description string `json:"description"`
		Context     string `json:"context"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	if tok.readOnly {
		writeError(w, http.StatusForbidden, "Resource not accessible by integration")
		return
	}
	invalid := func(field, msg string) {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed",
			"errors": []map[string]string{{"resource": "Status", "code": "custom", "field": field, "message": msg}}})
	}
	switch {
	case !states[in.State]:
		invalid("state", "state is not included in the list")
		return
	case utf8.RuneCountInString(in.Description) > MaxStatusDescription:
		invalid("description", fmt.Sprintf("description is too long (maximum is %d characters)", MaxStatusDescription))
		return
	case utf8.RuneCountInString(in.Context) > MaxStatusContext:
		invalid("context", fmt.Sprintf("context is too long (maximum is %d characters)", MaxStatusContext))
		return
	}
	if in.Context == "" {
		in.Context = "default"
	}
	st := Status{Owner: r.PathValue("owner"), Repo: r.PathValue("repo"), SHA: r.PathValue("sha"),
		State: in.State, Context: in.Context, Description: in.Description, TargetURL: in.TargetURL, Creator: tok.user}
	s.mu.Lock()
	s.statuses = append(s.statuses, st)
	n := len(s.statuses)
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{
		"id": n, "state": st.State, "context": st.Context, "description": st.Description,
		"target_url": st.TargetURL, "creator": st.Creator,
		"url": fmt.Sprintf("http://%s/repos/%s/%s/statuses/%s", r.Host, st.Owner, st.Repo, st.SHA),
	})
}
