package fakegithub

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v4"
)

// TestServerIsStrict: the fake refuses what GitHub refuses, so a client
// passing against it sends what GitHub needs.
func TestServerIsStrict(t *testing.T) {
	s := New(t, "12", "34")
	now := time.Now()
	sign := func(iss string, iat, exp time.Time, key any) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: iss,
			IssuedAt: jwt.NewNumericDate(iat), ExpiresAt: jwt.NewNumericDate(exp)}).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	good := sign("12", now.Add(-time.Minute), now.Add(9*time.Minute), s.Key)
	for _, tc := range []struct {
		name, method, path, accept, version, auth string
		status                                    int
		say                                       string
	}{
		{"good", "POST", "/app/installations/34/access_tokens", "application/vnd.github+json", "2022-11-28", "Bearer " + good, 201, ""},
		{"GET", "GET", "/app/installations/34/access_tokens", "application/vnd.github+json", "2022-11-28", "Bearer " + good, 404, "Not Found"},
		{"unknown installation", "POST", "/app/installations/35/access_tokens", "application/vnd.github+json", "2022-11-28", "Bearer " + good, 404, "Not Found"},
		{"no Accept", "POST", "/app/installations/34/access_tokens", "", "2022-11-28", "Bearer " + good, 415, "Accept"},
		{"no API version", "POST", "/app/installations/34/access_tokens", "application/vnd.github+json", "", "Bearer " + good, 400, "API version"},
		{"no JWT", "POST", "/app/installations/34/access_tokens", "application/vnd.github+json", "2022-11-28", "", 401, "could not be decoded"},
		{"another key", "POST", "/app/installations/34/access_tokens", "application/vnd.github+json", "2022-11-28",
			"Bearer " + sign("12", now.Add(-time.Minute), now.Add(9*time.Minute), NewKey(t)), 401, "could not be decoded"},
		{"another App", "POST", "/app/installations/34/access_tokens", "application/vnd.github+json", "2022-11-28",
			"Bearer " + sign("13", now.Add(-time.Minute), now.Add(9*time.Minute), s.Key), 401, "'Issuer' claim"},
		{"expired", "POST", "/app/installations/34/access_tokens", "application/vnd.github+json", "2022-11-28",
			"Bearer " + sign("12", now.Add(-20*time.Minute), now.Add(-time.Minute), s.Key), 401, "'Expiration time'"},
		{"too long", "POST", "/app/installations/34/access_tokens", "application/vnd.github+json", "2022-11-28",
			"Bearer " + sign("12", now, now.Add(20*time.Minute), s.Key), 401, "too far in the future"},
		{"issued in the future", "POST", "/app/installations/34/access_tokens", "application/vnd.github+json", "2022-11-28",
			"Bearer " + sign("12", now.Add(5*time.Minute), now.Add(9*time.Minute), s.Key), 401, "'Issued at'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, s.URL+tc.path, nil)
			for k, v := range map[string]string{"Accept": tc.accept, "X-GitHub-Api-Version": tc.version, "Authorization": tc.auth} {
				if v != "" {
					req.Header.Set(k, v)
				}
			}
			resp, err := s.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct {
				Token     string    `json:"token"`
				ExpiresAt time.Time `json:"expires_at"`
				Message   string    `json:"message"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&body)
			if resp.StatusCode != tc.status || !strings.Contains(body.Message, tc.say) {
				t.Fatalf("%d %q, want %d %q", resp.StatusCode, body.Message, tc.status, tc.say)
			}
			if tc.status == 201 && (!s.Valid(body.Token) || body.ExpiresAt.Before(now.Add(59*time.Minute))) {
				t.Fatalf("issued %+v", body)
			}
		})
	}
	if s.Valid("ghs_never-issued") {
		t.Fatal("an unissued token is valid")
	}
}
