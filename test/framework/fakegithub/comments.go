package fakegithub

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Issue comments and commit statuses, as the GitHub Action's client uses
// them: comments with real pagination (per_page, page and a Link header with
// next/last/prev/first), edits and deletes by their author only, the
// 65,536-character body limit (422), and commit statuses (422 for a
// description over 140 characters or a context over 255); a read-only token
// gets 403 "Resource not accessible by integration" on writes, as a fork
// PR's token does.

// Documentation URLs of the errors of these endpoints.
const (
	docComments = "https://docs.github.com/rest/issues/comments"
	docStatuses = "https://docs.github.com/rest/commits/statuses#create-a-commit-status"
)

// MaxBody is GitHub's limit on a comment body, in characters.
const MaxBody = 65536

// GitHub's limits on a commit status, in characters: the description (as
// documented) and the context (as enforced: 422 beyond it).
const (
	MaxStatusDescription = 140
	MaxStatusContext     = 255
)

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

// BodyLengths returns the length in characters of every comment body
// received by create or edit, including rejected ones.
func (s *Server) BodyLengths() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int{}, s.bodies...)
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
	base := s.apiBase(r)
	return apiComment{
		ID:                c.ID,
		NodeID:            fmt.Sprintf("IC_%d", c.ID),
		URL:               fmt.Sprintf("%s/repos/%s/%s/issues/comments/%d", base, c.Owner, c.Repo, c.ID),
		HTMLURL:           s.webURL(fmt.Sprintf("/%s/%s/pull/%d", c.Owner, c.Repo, c.Issue)) + fmt.Sprintf("#issuecomment-%d", c.ID),
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
		writeError(w, http.StatusNotFound, "Not Found", docComments)
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
		u, _ := url.Parse(s.apiBase(r) + r.URL.Path)
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
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Invalid request.\n\n\"body\" wasn't supplied.", "documentation_url": docComments, "status": "422"})
		return "", false
	}
	n := utf8.RuneCountInString(*in.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, n)
	limit := s.maxBody
	s.mu.Unlock()
	if tok.readOnly {
		writeError(w, http.StatusForbidden, "Resource not accessible by integration", docComments)
		return "", false
	}
	if n > limit {
		validationFailed(w, "IssueComment", "body", "custom", fmt.Sprintf("body is too long (maximum is %d characters)", limit), docComments+"#create-an-issue-comment")
		return "", false
	}
	return *in.Body, true
}

func (s *Server) createComment(w http.ResponseWriter, r *http.Request) {
	tok, _ := s.auth(r)
	issue, err := strconv.Atoi(r.PathValue("number"))
	if err != nil {
		writeError(w, http.StatusNotFound, "Not Found", docComments)
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
		writeError(w, http.StatusNotFound, "Not Found", docComments)
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
		writeError(w, http.StatusNotFound, "Not Found", docComments)
		return
	}
	body, ok := s.readBody(w, r, tok)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.User.ID != tok.user.ID {
		writeError(w, http.StatusForbidden, "Resource not accessible by integration", docComments)
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
		writeError(w, http.StatusNotFound, "Not Found", docComments)
	case tok.readOnly || c.User.ID != tok.user.ID:
		writeError(w, http.StatusForbidden, "Resource not accessible by integration", docComments)
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
		writeError(w, http.StatusBadRequest, "Problems parsing JSON", docStatuses)
		return
	}
	if tok.readOnly {
		writeError(w, http.StatusForbidden, "Resource not accessible by integration", docStatuses)
		return
	}
	invalid := func(field, msg string) {
		validationFailed(w, "Status", field, "custom", msg, docStatuses)
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
		"url": fmt.Sprintf("%s/repos/%s/%s/statuses/%s", s.apiBase(r), st.Owner, st.Repo, st.SHA),
	})
}
