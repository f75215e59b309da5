package cloudtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Update kinds and results, as the REST API spells them (AppUpdateKind,
// AppUpdateResult).
const (
	KindUpdate   = "update"
	KindPreview  = "preview"
	KindPupdate  = "Pupdate" // a preview of an update, as the List Previews example shows it
	KindRefresh  = "refresh"
	KindDestroy  = "destroy"
	KindPrefresh = "Prefresh"

	ResultNotStarted = "not-started"
	ResultInProgress = "in-progress"
	ResultSucceeded  = "succeeded"
	ResultFailed     = "failed"
)

// ConfigValue is a stack configuration value as the API returns it
// (AppConfigValue).
type ConfigValue struct {
	String string `json:"string"`
	Secret bool   `json:"secret"`
	Object bool   `json:"object"`
}

// Update is one update (or preview) of a stack: the fields of the API's
// AppUpdateInfo plus the service-format updateID. Version is assigned by
// AddUpdate.
type Update struct {
	Kind            string
	Result          string
	StartTime       int64 // unix seconds
	EndTime         int64 // unix seconds, 0 while running
	Message         string
	Environment     map[string]string
	Config          map[string]ConfigValue
	ResourceChanges map[string]int
	ResourceCount   int
	// UpdateID is generated when empty.
	UpdateID string
	// Version is the stack version after the update; for a preview, the
	// stack version it ran against. Set by AddUpdate.
	Version int
	// RequestedByToken is the access-token name the update ran with (the
	// service format carries it); tests use it to check it never leaks.
	RequestedByToken string
}

// IsPreview reports whether the kind is a preview (listed by List Previews,
// not by List Stack Updates).
func IsPreview(kind string) bool {
	return kind == KindPreview || (len(kind) > 1 && kind[0] == 'P')
}

type stack struct {
	version int
	updates []*Update // in insertion order
}

// Fault is an injected answer, served instead of the real one to the next
// Count requests (before authentication, as a proxy or rate limiter in
// front of the service would).
type Fault struct {
	// Status is the HTTP status to answer (429, 500, 503, 403…); 0 with
	// Drop set closes the connection without an answer.
	Status int
	// RetryAfter is sent as the Retry-After header when not empty.
	RetryAfter string
	// Drop closes the connection without answering (a network error).
	// net/http retries an idempotent request once when a reused
	// connection closes: give Count 2 when the client may reuse one.
	Drop bool
	// Count is how many requests get the fault; 0 means 1.
	Count int
}

// Server is the fake Pulumi Cloud. Its zero value is not usable: use New.
type Server struct {
	*httptest.Server

	mu      sync.Mutex
	token   string
	stacks  map[string]*stack
	faults  []Fault
	log     []string
	headers []http.Header
	nextID  int
}

// New starts a server that accepts the access token token. Close it when
// done (or use NewTB).
func New(token string) *Server {
	s := &Server{token: token, stacks: map[string]*stack{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/stacks/{org}/{project}/{stack}/updates", s.listUpdates)
	mux.HandleFunc("GET /api/stacks/{org}/{project}/{stack}/updates/latest", s.latestUpdate)
	mux.HandleFunc("GET /api/stacks/{org}/{project}/{stack}/updates/latest/previews", s.latestPreviews)
	mux.HandleFunc("GET /api/stacks/{org}/{project}/{stack}/updates/{version}/previews", s.versionPreviews)
	s.Server = httptest.NewServer(s.front(mux))
	return s
}

// TB is the part of testing.TB New needs.
type TB interface {
	Helper()
	Cleanup(func())
}

// NewTB starts a server closed when the test ends.
func NewTB(t TB, token string) *Server {
	t.Helper()
	s := New(token)
	t.Cleanup(s.Close)
	return s
}

// SetToken changes the accepted token (a rotated token).
func (s *Server) SetToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = token
}

// AddStack creates an empty stack.
func (s *Server) AddStack(org, project, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key(org, project, name)
	if s.stacks[k] == nil {
		s.stacks[k] = &stack{}
	}
}

// AddUpdate appends an update or preview to a stack (creating the stack),
// assigns its version and, when empty, its UpdateID, and returns it. An
// update of a non-preview kind raises the stack's version; a preview runs
// against the current one.
func (s *Server) AddUpdate(org, project, name string, u Update) Update {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key(org, project, name)
	st := s.stacks[k]
	if st == nil {
		st = &stack{}
		s.stacks[k] = st
	}
	if !IsPreview(u.Kind) {
		st.version++
	}
	u.Version = st.version
	if u.UpdateID == "" {
		s.nextID++
		u.UpdateID = fmt.Sprintf("00000000-0000-4000-8000-%012d", s.nextID)
	}
	cp := u
	st.updates = append(st.updates, &cp)
	return cp
}

// SetResult changes the result and end time of an update (an update
// finishing). It reports whether the update exists.
func (s *Server) SetResult(org, project, name, updateID, result string, endTime int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stacks[key(org, project, name)]
	if st == nil {
		return false
	}
	for _, u := range st.updates {
		if u.UpdateID == updateID {
			u.Result, u.EndTime = result, endTime
			return true
		}
	}
	return false
}

// Inject queues a fault for the next requests.
func (s *Server) Inject(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Count <= 0 {
		f.Count = 1
	}
	s.faults = append(s.faults, f)
}

// Requests is how many requests the server received (faulted ones
// included).
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.log)
}

// RequestLog is the path and query of every request received, in order.
func (s *Server) RequestLog() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.log...)
}

// LastHeader is the header of the last request received (nil before the
// first).
func (s *Server) LastHeader() http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.headers) == 0 {
		return nil
	}
	return s.headers[len(s.headers)-1].Clone()
}

func key(org, project, name string) string { return org + "/" + project + "/" + name }

// errorResponse is the API's error body (apitype.ErrorResponse).
type errorResponse struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorResponse{Code: code, Message: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

var acceptRE = regexp.MustCompile(`^application/vnd\.pulumi\+[0-9]+$`)

// front logs the request, serves injected faults, then checks the token
// (401 without a token or with a wrong one, as documented) and the Accept
// header (the documented application/vnd.pulumi+8; the service's answer to
// a missing one is not documented, this server answers 406).
func (s *Server) front(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.log = append(s.log, r.URL.RequestURI())
		s.headers = append(s.headers, r.Header.Clone())
		var fault *Fault
		if len(s.faults) > 0 {
			f := s.faults[0]
			fault = &f
			s.faults[0].Count--
			if s.faults[0].Count == 0 {
				s.faults = s.faults[1:]
			}
		}
		token := s.token
		s.mu.Unlock()

		if fault != nil {
			if fault.Drop {
				if hj, ok := w.(http.Hijacker); ok {
					if conn, _, err := hj.Hijack(); err == nil {
						_ = conn.Close()
						return
					}
				}
				panic(http.ErrAbortHandler)
			}
			if fault.RetryAfter != "" {
				w.Header().Set("Retry-After", fault.RetryAfter)
			}
			writeError(w, fault.Status, http.StatusText(fault.Status))
			return
		}
		auth := r.Header.Get("Authorization")
		got, ok := strings.CutPrefix(auth, "token ")
		if !ok || got == "" || got != token {
			writeError(w, http.StatusUnauthorized, "Unauthorized: No credentials provided or are invalid.")
			return
		}
		if !acceptRE.MatchString(r.Header.Get("Accept")) {
			writeError(w, http.StatusNotAcceptable, "Accept must be application/vnd.pulumi+8")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// stackOf answers 404 for an unknown stack.
func (s *Server) stackOf(w http.ResponseWriter, r *http.Request) (*stack, bool) {
	k := key(r.PathValue("org"), r.PathValue("project"), r.PathValue("stack"))
	st := s.stacks[k]
	if st == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("Stack '%s' not found", k))
		return nil, false
	}
	return st, true
}

// Wire shapes, as documented: AppUpdateInfo (the CLI format, and "info" in
// the service format), UpdateInfo (the service format) and
// GetStackUpdatesResponse.
type appUpdateInfo struct {
	Kind            string                 `json:"kind"`
	StartTime       int64                  `json:"startTime"`
	Message         string                 `json:"message"`
	Environment     map[string]string      `json:"environment"`
	Config          map[string]ConfigValue `json:"config"`
	Result          string                 `json:"result"`
	EndTime         int64                  `json:"endTime"`
	Version         int                    `json:"version"`
	ResourceChanges map[string]int         `json:"resourceChanges,omitempty"`
	ResourceCount   int                    `json:"resourceCount,omitempty"`
}

type userInfo struct {
	Name        string `json:"name"`
	GithubLogin string `json:"githubLogin"`
	AvatarURL   string `json:"avatarUrl"`
}

type updateInfo struct {
	Info             appUpdateInfo `json:"info"`
	UpdateID         string        `json:"updateID"`
	Version          int           `json:"version"`
	LatestVersion    int           `json:"latestVersion"`
	RequestedBy      userInfo      `json:"requestedBy"`
	RequestedByToken string        `json:"requestedByToken,omitempty"`
}

type getStackUpdatesResponse struct {
	Updates      []updateInfo `json:"updates"`
	ItemsPerPage int          `json:"itemsPerPage"`
	Total        int          `json:"total"`
}

type cliUpdatesResponse struct {
	Updates []appUpdateInfo `json:"updates"`
}

func (u *Update) app() appUpdateInfo {
	env, cfg := u.Environment, u.Config
	if env == nil {
		env = map[string]string{}
	}
	if cfg == nil {
		cfg = map[string]ConfigValue{}
	}
	return appUpdateInfo{
		Kind: u.Kind, StartTime: u.StartTime, Message: u.Message,
		Environment: env, Config: cfg, Result: u.Result, EndTime: u.EndTime,
		Version: u.Version, ResourceChanges: u.ResourceChanges, ResourceCount: u.ResourceCount,
	}
}

func (u *Update) service(latest int) updateInfo {
	return updateInfo{
		Info: u.app(), UpdateID: u.UpdateID, Version: u.Version, LatestVersion: latest,
		RequestedBy:      userInfo{Name: "CI", GithubLogin: "ci-bot", AvatarURL: "https://example.com/ci.png"},
		RequestedByToken: u.RequestedByToken,
	}
}

// page parses page and pageSize: not paginated without either; page is
// 1-based (page 0 returns everything, as documented for List Previews).
func page(r *http.Request, n int) (from, to, size int, err error) {
	q := r.URL.Query()
	ps, p := q.Get("pageSize"), q.Get("page")
	if ps == "" && p == "" {
		return 0, n, n, nil
	}
	size, pg := n, 1
	if ps != "" {
		if size, err = strconv.Atoi(ps); err != nil || size < 1 {
			return 0, 0, 0, fmt.Errorf("invalid pageSize %q", ps)
		}
	}
	if p != "" {
		if pg, err = strconv.Atoi(p); err != nil || pg < 0 {
			return 0, 0, 0, fmt.Errorf("invalid page %q", p)
		}
	}
	if pg == 0 {
		return 0, n, n, nil
	}
	from = min((pg-1)*size, n)
	return from, min(from+size, n), size, nil
}

// listUpdates is List Stack Updates: the stack's updates (not its
// previews), newest first, in the CLI format unless output-type=service.
func (s *Server) listUpdates(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.stackOf(w, r)
	if !ok {
		return
	}
	var ups []*Update
	for _, u := range st.updates {
		if !IsPreview(u.Kind) {
			ups = append(ups, u)
		}
	}
	sort.SliceStable(ups, func(i, j int) bool { return ups[i].Version > ups[j].Version })
	from, to, size, err := page(r, len(ups))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	switch ot := r.URL.Query().Get("output-type"); ot {
	case "service":
		resp := getStackUpdatesResponse{Updates: []updateInfo{}, ItemsPerPage: size, Total: len(ups)}
		for _, u := range ups[from:to] {
			resp.Updates = append(resp.Updates, u.service(st.version))
		}
		writeJSON(w, http.StatusOK, resp)
	case "", "cli":
		resp := cliUpdatesResponse{Updates: []appUpdateInfo{}}
		for _, u := range ups[from:to] {
			resp.Updates = append(resp.Updates, u.app())
		}
		writeJSON(w, http.StatusOK, resp)
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid output-type %q", ot))
	}
}

// latestUpdate is Get Latest Update: the newest update (service format);
// 404 when the stack has none.
func (s *Server) latestUpdate(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.stackOf(w, r)
	if !ok {
		return
	}
	var latest *Update
	for _, u := range st.updates {
		if !IsPreview(u.Kind) && (latest == nil || u.Version > latest.Version) {
			latest = u
		}
	}
	if latest == nil {
		writeError(w, http.StatusNotFound, "no updates found for the stack")
		return
	}
	writeJSON(w, http.StatusOK, latest.service(st.version))
}

// latestPreviews is List Previews: the previews since the last update
// (those run against the stack's current version).
func (s *Server) latestPreviews(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.stackOf(w, r)
	if !ok {
		return
	}
	s.previews(w, r, st, st.version)
}

// versionPreviews is Get Stack Previews: the previews run against a given
// version.
func (s *Server) versionPreviews(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.stackOf(w, r)
	if !ok {
		return
	}
	v, err := strconv.Atoi(r.PathValue("version"))
	if err != nil || v < 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid version %q", r.PathValue("version")))
		return
	}
	s.previews(w, r, st, v)
}

// previews answers the previews at a version, newest first unless
// asc=true.
func (s *Server) previews(w http.ResponseWriter, r *http.Request, st *stack, version int) {
	var ps []*Update
	for i := len(st.updates) - 1; i >= 0; i-- {
		if u := st.updates[i]; IsPreview(u.Kind) && u.Version == version {
			ps = append(ps, u)
		}
	}
	switch r.URL.Query().Get("asc") {
	case "true":
		for i, j := 0, len(ps)-1; i < j; i, j = i+1, j-1 {
			ps[i], ps[j] = ps[j], ps[i]
		}
	case "", "false":
	default:
		writeError(w, http.StatusBadRequest, "invalid asc")
		return
	}
	from, to, size, err := page(r, len(ps))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	resp := getStackUpdatesResponse{Updates: []updateInfo{}, ItemsPerPage: size, Total: len(ps)}
	for _, u := range ps[from:to] {
		resp.Updates = append(resp.Updates, u.service(st.version))
	}
	writeJSON(w, http.StatusOK, resp)
}
