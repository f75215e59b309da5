package fakegithub

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

// Options configure a Server. The zero value is a github.com-like REST API
// on plain HTTP with no App and no git hosting.
type Options struct {
	// TLS serves HTTPS with a certificate of the test authority CAPEM, as
	// GitHub does (the operator accepts no other API URL). Without it the
	// server speaks plain HTTP on loopback, which a client must allow as
	// such (the action's AllowLoopbackHTTP).
	TLS bool
	// AppID makes the server a GitHub App's: it answers "Create an
	// installation access token for an app" for the installations listed in
	// Installations, verifying JWTs signed with Key (made by Start).
	AppID         string
	Installations []string
	// AppSlug names the App's bot (AppSlug+"[bot]"), the author of what its
	// installation tokens write; default "stackflow-test".
	AppSlug string
	// GitRoot makes the server a GitHub Enterprise Server hosting the bare
	// repositories under it (GitRoot/<owner>/<repo>.git) with git's smart
	// HTTP at /<owner>/<repo>.git; the REST API is then only under /api/v3,
	// as on GHES, and serves their pull requests.
	GitRoot string
	// Host is the name the server is reached by (through hostproxy), used
	// in clone and HTML URLs; default its loopback address.
	Host string
}

// Server is the fake GitHub; start one with Start or New. It is safe for
// concurrent use; tests read and seed its state through methods.
type Server struct {
	// URL is the server's root: http(s)://127.0.0.1:<port>. The REST API is
	// at URL (github.com's layout, unless GitRoot is set) and at URL+"/api/v3"
	// (GitHub Enterprise Server's); see BaseURL and EnterpriseURL.
	URL string
	// Addr is the loopback address it listens on (for hostproxy.Route).
	Addr string
	// Host is the name it is reached by (Options.Host, default Addr).
	Host string

	// AppID is the App's ID; Installations are its installations' IDs.
	AppID         string
	Installations []string
	// Key is the App's private key; KeyPEM its PKCS#1 PEM (the App
	// settings' download). Nil without an App.
	Key    *rsa.PrivateKey
	KeyPEM string
	// TokenTTL is the lifetime of installation tokens (GitHub's: 1 hour).
	TokenTTL time.Duration
	// Now is the server's clock (default time.Now). Set before use.
	Now func() time.Time
	// Public lets anyone fetch (clone) the hosted repositories without
	// credentials, as from a public repository; pushes still need a token.
	// Set before use.
	Public bool

	o    Options
	srv  *http.Server
	mux  *http.ServeMux
	git  http.Handler
	tls  bool
	slug string

	mu       sync.Mutex
	tokens   map[string]token
	calls    int                // requests to /app/... (token exchanges, good or not)
	comments []*Comment         // see comments.go
	statuses []Status           // see comments.go
	pulls    map[string][]*pull // "owner/repo" → pull requests, number-1 indexed (see pulls.go)
	nextID   int64              // last comment ID
	clock    time.Time          // comments' timestamps
	latency  time.Duration      // before every request
	maxBody  int                // comment body limit
	requests []string           // "METHOD /uri" of every request
	bodies   []int              // lengths (characters) of comment bodies received
}

// token is a credential the server accepts.
type token struct {
	user     User
	readOnly bool      // writes answer 403, as a fork PR's token gets
	app      bool      // an installation token: GET /user answers 403
	expires  time.Time // zero: never
}

// User is an account the server knows.
type User struct {
	Login string `json:"login"`
	ID    int64  `json:"id"`
	Type  string `json:"type"` // "User" or "Bot"
}

type prefixKey struct{}

// appTokenPattern is the route of "Create an installation access token for
// an app", which authenticates with the App's JWT rather than a token.
const appTokenPattern = "POST /app/installations/{id}/access_tokens"

// Start starts a fake GitHub on a loopback port; Close stops it.
func Start(o Options) (*Server, error) {
	s := &Server{o: o, AppID: o.AppID, Installations: o.Installations, TokenTTL: time.Hour,
		tls: o.TLS, slug: o.AppSlug, tokens: map[string]token{}, pulls: map[string][]*pull{},
		nextID: 1000, clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), maxBody: MaxBody}
	if s.slug == "" {
		s.slug = "stackflow-test"
	}
	if o.AppID != "" {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, err
		}
		s.Key, s.KeyPEM = k, PEM(k)
	}
	if o.GitRoot != "" {
		g, err := gitrepo.Handler(o.GitRoot)
		if err != nil {
			return nil, err
		}
		s.git = g
	}
	s.routes()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.Addr = l.Addr().String()
	s.Host = o.Host
	if s.Host == "" {
		s.Host = s.Addr
	}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	if o.TLS {
		if CAPEM(); caErr != nil {
			l.Close()
			return nil, fmt.Errorf("fake GitHub certificate: %w", caErr)
		}
		// HTTP/1.1 only, as net/http/httptest's TLS servers.
		s.srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{caCert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
		l = tls.NewListener(l, s.srv.TLSConfig)
		s.URL = "https://" + s.Addr
	} else {
		s.URL = "http://" + s.Addr
	}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

// New starts a fake GitHub for a test, closed at its cleanup.
func New(t testing.TB, o Options) *Server {
	t.Helper()
	s, err := Start(o)
	if err != nil {
		t.Fatalf("start fake GitHub: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// NewApp is New for a GitHub App's API over HTTPS, as the operator's
// githubApp credentials reach it.
func NewApp(t testing.TB, appID string, installations ...string) *Server {
	t.Helper()
	return New(t, Options{TLS: true, AppID: appID, Installations: installations})
}

// Close stops serving.
func (s *Server) Close() error { return s.srv.Close() }

// BaseURL is the API root in github.com's layout, as GITHUB_API_URL has it
// there; EnterpriseURL is GitHub Enterprise Server's (<root>/api/v3).
func (s *Server) BaseURL() string       { return s.URL }
func (s *Server) EnterpriseURL() string { return s.URL + "/api/v3" }

// Client is an HTTP client that trusts the fake's certificate (and no
// other), follows no redirects and uses no proxy.
func (s *Server) Client() *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(CAPEM())
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (s *Server) routes() {
	mux := http.NewServeMux()
	mux.HandleFunc(appTokenPattern, s.createInstallationToken)
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
			writeError(w, http.StatusNotFound, "Not Found", docREST)
		}
	})
	mux.HandleFunc("POST /repos/{owner}/{repo}/issues/{number}/comments", s.createComment)
	mux.HandleFunc("PATCH /repos/{owner}/{repo}/issues/comments/{id}", s.editComment)
	mux.HandleFunc("DELETE /repos/{owner}/{repo}/issues/comments/{id}", s.deleteComment)
	mux.HandleFunc("POST /repos/{owner}/{repo}/statuses/{sha}", s.createStatus)
	mux.HandleFunc("POST /repos/{owner}/{repo}/pulls", s.createPull)
	mux.HandleFunc("GET /repos/{owner}/{repo}/pulls", s.listPulls)
	mux.HandleFunc("GET /repos/{owner}/{repo}/pulls/{number}", s.getPull)
	mux.HandleFunc("PUT /repos/{owner}/{repo}/pulls/{number}/merge", s.mergePull)
	mux.HandleFunc("POST /repos/{owner}/{repo}/issues/{number}/labels", s.addLabels)
	s.mux = mux
}

// docREST is the documentation URL of errors not tied to one endpoint.
const docREST = "https://docs.github.com/rest"

// ServeHTTP routes a request as GitHub does: git paths to the hosted
// repositories, the REST API at the root (github.com's api host) or under
// /api/v3 (GHES), unknown routes 404 and requests without a known,
// unexpired token 401 "Bad credentials" — but for the App's token exchange,
// which authenticates with its JWT.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests = append(s.requests, r.Method+" "+r.URL.RequestURI())
	lat := s.latency
	s.mu.Unlock()
	if lat > 0 {
		time.Sleep(lat)
	}
	p, enterprise := strings.CutPrefix(r.URL.Path, "/api/v3/")
	if s.git != nil && !enterprise {
		// On GHES everything outside /api/ is the web host: git here.
		if strings.HasPrefix(r.URL.Path, "/api/") {
			writeError(w, http.StatusNotFound, "Not Found", docREST)
			return
		}
		s.serveGit(w, r)
		return
	}
	if enterprise {
		r2 := r.Clone(context.WithValue(r.Context(), prefixKey{}, "/api/v3"))
		r2.URL.Path, r2.URL.RawPath = "/"+p, ""
		r = r2
	}
	if strings.HasPrefix(r.URL.Path, "/app/") {
		s.mu.Lock()
		s.calls++
		s.mu.Unlock()
	}
	_, pattern := s.mux.Handler(r)
	switch {
	case pattern == "":
		writeError(w, http.StatusNotFound, "Not Found", docREST)
		return
	case pattern == appTokenPattern:
	default:
		if _, ok := s.auth(r); !ok {
			writeError(w, http.StatusUnauthorized, "Bad credentials", docREST)
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// apiBase is the API root a response's URLs are under, as the client
// reached it.
func (s *Server) apiBase(r *http.Request) string {
	prefix, _ := r.Context().Value(prefixKey{}).(string)
	return s.scheme() + "://" + r.Host + prefix
}

// webURL is the web (HTML, clone) URL of a path on this server.
func (s *Server) webURL(path string) string {
	return (&url.URL{Scheme: s.scheme(), Host: s.Host, Path: path}).String()
}

func (s *Server) scheme() string {
	if s.tls {
		return "https"
	}
	return "http"
}

// AddToken registers a personal access token authenticating as login.
func (s *Server) AddToken(tok, login string, readOnly bool) User {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := User{Login: login, ID: userID(login), Type: "User"}
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
	u := User{Login: botLogin, ID: userID(botLogin), Type: "Bot"}
	s.tokens[tok] = token{user: u, readOnly: readOnly, app: true}
	return u
}

func userID(login string) int64 {
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

// Requests returns "METHOD /uri" of every request received.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string{}, s.requests...)
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// credential is the token a request carries: an Authorization header of
// scheme Bearer or token (GitHub's older one; schemes are case-insensitive)
// or a basic-auth password (any user name, as GitHub takes a token).
func credential(r *http.Request) (string, bool) {
	if _, pass, ok := r.BasicAuth(); ok {
		return pass, true
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || (!strings.EqualFold(scheme, "Bearer") && !strings.EqualFold(scheme, "token")) {
		return "", false
	}
	return tok, true
}

// auth is the known, unexpired token of the request.
func (s *Server) auth(r *http.Request) (token, bool) {
	t, ok := credential(r)
	if !ok {
		return token{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tok, ok := s.tokens[t]
	if !ok || (!tok.expires.IsZero() && !s.now().Before(tok.expires)) {
		return token{}, false
	}
	return tok, true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers as GitHub does: a JSON message, the documentation URL
// and the status.
func writeError(w http.ResponseWriter, status int, msg, doc string) {
	writeJSON(w, status, map[string]string{"message": msg, "documentation_url": doc, "status": fmt.Sprint(status)})
}

// validationFailed answers 422 "Validation Failed" with one error, as
// GitHub does for a request it parsed but refuses.
func validationFailed(w http.ResponseWriter, resource, field, code, msg, doc string) {
	e := map[string]string{"resource": resource, "field": field, "code": code}
	if msg != "" {
		e["message"] = msg
	}
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed",
		"errors": []map[string]string{e}, "documentation_url": doc, "status": "422"})
}

func (s *Server) getUser(w http.ResponseWriter, r *http.Request) {
	tok, _ := s.auth(r)
	if tok.app {
		writeError(w, http.StatusForbidden, "Resource not accessible by integration", "https://docs.github.com/rest/users/users#get-the-authenticated-user")
		return
	}
	writeJSON(w, http.StatusOK, tok.user)
}

var (
	caOnce sync.Once
	caPEM  []byte
	caCert tls.Certificate
	caErr  error
)

// CAPEM is the PEM certificate every fake GitHub of this process serves
// HTTPS with (self-signed, for 127.0.0.1 and localhost): a process that must
// trust the fakes without a Client of theirs (a workspace agent) gets it in
// a file named by SSL_CERT_FILE, as a GitHub Enterprise Server's private
// authority is trusted in production.
func CAPEM() []byte {
	caOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			caErr = err
			return
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fake GitHub"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			IsCA: true, BasicConstraintsValid: true,
			KeyUsage:    x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			caErr = err
			return
		}
		caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		caCert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	})
	if caErr != nil {
		return nil
	}
	return caPEM
}
