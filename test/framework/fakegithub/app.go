package fakegithub

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v4"
)

// docAppToken documents the endpoint the App's errors come from.
const docAppToken = "https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app"

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

// Calls is how many requests reached the App's endpoints (/app/...):
// token exchanges, answered successfully or not.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// Valid reports an installation token this server issued that has not
// expired.
func (s *Server) Valid(tok string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tokens[tok]
	return ok && t.app && !t.expires.IsZero() && s.now().Before(t.expires)
}

// Authorize accepts what GitHub's git servers accept from an App: user
// x-access-token with a valid installation token (for
// gitrepo.HTTPServer.Authorize).
func (s *Server) Authorize(user, password string) bool {
	return user == "x-access-token" && s.Valid(password)
}

// createInstallationToken is "Create an installation access token for an
// app": it verifies the JWT's RS256 signature with the App's public key, its
// claims (iss the App ID, iat in the past, exp at most 10 minutes ahead and
// not passed), the documented headers and the installation ID, and answers
// 201 with a token and its expiry. The token then authenticates the REST
// API and git as the App's bot.
func (s *Server) createInstallationToken(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if s.Key == nil { // not an App's server
		writeError(w, http.StatusNotFound, "Not Found", docAppToken)
		return
	}
	if r.Header.Get("Accept") != "application/vnd.github+json" {
		writeError(w, http.StatusUnsupportedMediaType, "Unsupported 'Accept' header", docAppToken)
		return
	}
	if v := r.Header.Get("X-GitHub-Api-Version"); v != "2022-11-28" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Invalid API version %q", v), docAppToken)
		return
	}
	bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		writeError(w, http.StatusUnauthorized, "A JSON web token could not be decoded", docAppToken)
		return
	}
	if msg := s.checkJWT(bearer); msg != "" {
		writeError(w, http.StatusUnauthorized, msg, docAppToken)
		return
	}
	if !slices.Contains(s.Installations, id) {
		writeError(w, http.StatusNotFound, "Not Found", docAppToken)
		return
	}
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	tok := "ghs_" + hex.EncodeToString(b)
	exp := s.now().Add(s.TokenTTL).UTC().Truncate(time.Second)
	bot := s.slug + "[bot]"
	s.mu.Lock()
	s.tokens[tok] = token{user: User{Login: bot, ID: userID(bot), Type: "Bot"}, app: true, expires: exp}
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{"token": tok, "expires_at": exp.Format(time.RFC3339),
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
