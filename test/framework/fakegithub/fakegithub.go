// Package fakegithub holds faithful local stand-ins for GitHub, for tests:
//
//   - Server, the one REST endpoint a GitHub App installation needs, "Create
//     an installation access token for an app" (POST
//     /app/installations/{installation_id}/access_tokens): it verifies the
//     JWT's RS256 signature with the App's public key, its claims (iss the App
//     ID, iat in the past, exp at most 10 minutes ahead and not passed), the
//     documented headers and the installation ID, answers 201 with a token and
//     its expiry, and GitHub-shaped errors otherwise. It counts calls and tells
//     which tokens it issued, so a git server can accept only those. It serves
//     HTTPS, as the operator accepts no other API URL, with a certificate of a
//     test authority (CAPEM) that Client trusts.
//   - Enterprise, a GitHub Enterprise Server serving git and the pull request
//     API that Kargo's git-open-pr and git-wait-for-pr steps use.
package fakegithub

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v4"
)

// Server is the fake GitHub API.
type Server struct {
	// URL is the API's base URL (githubApp.apiURL): https://127.0.0.1:<port>.
	URL string
	// AppID is the App's ID; Installations are its installations' IDs.
	AppID         string
	Installations []string
	// Key is the App's private key; KeyPEM its PKCS#1 PEM (the App
	// settings' download).
	Key    *rsa.PrivateKey
	KeyPEM string
	// TokenTTL is the lifetime of issued tokens (GitHub's: 1 hour).
	TokenTTL time.Duration
	// Now is the server's clock (default time.Now).
	Now func() time.Time

	mu     sync.Mutex
	calls  int
	issued map[string]time.Time
}

// New starts a fake GitHub for one App with the given installations, until
// the test ends.
func New(t testing.TB, appID string, installations ...string) *Server {
	t.Helper()
	s := &Server{AppID: appID, Installations: installations, Key: NewKey(t), TokenTTL: time.Hour, issued: map[string]time.Time{}}
	s.KeyPEM = PEM(s.Key)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert(t)}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// Client is an HTTP client that trusts the fake's certificate (and no
// other), follows no redirects and uses no proxy.
func (s *Server) Client() *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(CAPEM())
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

var (
	caOnce sync.Once
	caPEM  []byte
	caCert tls.Certificate
	caErr  error
)

// CAPEM is the PEM certificate every fake GitHub of this process serves
// with (self-signed, for 127.0.0.1 and localhost): a process that must trust
// the fakes without a Client of theirs (a workspace agent) gets it in a file
// named by SSL_CERT_FILE, as a GitHub Enterprise Server's private authority
// is trusted in production.
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
	return caPEM
}

func serverCert(t testing.TB) tls.Certificate {
	t.Helper()
	if CAPEM(); caErr != nil {
		t.Fatalf("fake GitHub certificate: %v", caErr)
	}
	return caCert
}

// NewKey makes a 2048-bit RSA key, as GitHub issues.
func NewKey(t testing.TB) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// PEM encodes k as GitHub's downloads are ("RSA PRIVATE KEY", PKCS#1).
func PEM(k *rsa.PrivateKey) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}))
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Calls is how many token requests were answered (successful or not).
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// Valid reports a token this server issued that has not expired.
func (s *Server) Valid(token string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.issued[token]
	return ok && s.now().Before(exp)
}

// Authorize accepts what GitHub's git servers accept from an App: user
// x-access-token with a valid installation token (for
// gitrepo.HTTPServer.Authorize).
func (s *Server) Authorize(user, password string) bool {
	return user == "x-access-token" && s.Valid(password)
}

// fail answers as GitHub does: a JSON message and documentation URL.
func fail(w http.ResponseWriter, status int, msg string) {
	writeError(w, status, msg, "https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app")
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()
	id, ok := strings.CutPrefix(r.URL.Path, "/app/installations/")
	id, ok2 := strings.CutSuffix(id, "/access_tokens")
	if !ok || !ok2 || strings.Contains(id, "/") || r.Method != http.MethodPost {
		fail(w, http.StatusNotFound, "Not Found")
		return
	}
	if r.Header.Get("Accept") != "application/vnd.github+json" {
		fail(w, http.StatusUnsupportedMediaType, "Unsupported 'Accept' header")
		return
	}
	if v := r.Header.Get("X-GitHub-Api-Version"); v != "2022-11-28" {
		fail(w, http.StatusBadRequest, fmt.Sprintf("Invalid API version %q", v))
		return
	}
	bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		fail(w, http.StatusUnauthorized, "A JSON web token could not be decoded")
		return
	}
	if msg := s.checkJWT(bearer); msg != "" {
		fail(w, http.StatusUnauthorized, msg)
		return
	}
	known := false
	for _, i := range s.Installations {
		known = known || i == id
	}
	if !known {
		fail(w, http.StatusNotFound, "Not Found")
		return
	}
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	token := "ghs_" + hex.EncodeToString(b)
	exp := s.now().Add(s.TokenTTL).UTC().Truncate(time.Second)
	s.mu.Lock()
	s.issued[token] = exp
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"token": token, "expires_at": exp.Format(time.RFC3339),
		"permissions": map[string]string{"contents": "read", "metadata": "read"}, "repository_selection": "all"})
}

// checkJWT returns GitHub's complaint about the JWT, "" when it is good.
func (s *Server) checkJWT(raw string) string {
	var claims jwt.RegisteredClaims
	_, err := jwt.NewParser(jwt.WithValidMethods([]string{"RS256"}), jwt.WithoutClaimsValidation()).
		ParseWithClaims(raw, &claims, func(*jwt.Token) (any, error) { return &s.Key.PublicKey, nil })
	if err != nil {
		return "A JSON web token could not be decoded"
	}
	now := s.now()
	switch {
	case claims.Issuer != s.AppID:
		return "'Issuer' claim ('iss') must be an Integer"
	case claims.IssuedAt == nil || claims.IssuedAt.After(now.Add(time.Second)):
		return "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued."
	case claims.ExpiresAt == nil || !claims.ExpiresAt.After(now):
		return "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires."
	case claims.ExpiresAt.Sub(claims.IssuedAt.Time) > 10*time.Minute+time.Minute || claims.ExpiresAt.Sub(now) > 10*time.Minute:
		return "'Expiration time' claim ('exp') is too far in the future."
	}
	return ""
}
