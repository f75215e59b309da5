package fakegithub

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v4"
)

// TestServerIsStrict: the fake refuses what GitHub refuses, so a client
// passing against it sends what GitHub needs.
func TestServerIsStrict(t *testing.T) {
	s := NewApp(t, "12", "34")
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

// TestInstallationTokenIsTheBots: a token the App's exchange issued
// authenticates the REST API as the App's bot (GET /user refused, as GitHub
// refuses an installation token; a comment authored by <slug>[bot]) in both
// layouts, until it expires; then "Bad credentials".
func TestInstallationTokenIsTheBots(t *testing.T) {
	s := New(t, Options{TLS: true, AppID: "12", Installations: []string{"34"}, AppSlug: "stackflow-preview"})
	now := time.Now()
	s.Now = func() time.Time { return now }
	jwtTok, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: "12",
		IssuedAt: jwt.NewNumericDate(now.Add(-time.Minute)), ExpiresAt: jwt.NewNumericDate(now.Add(9 * time.Minute))}).SignedString(s.Key)
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, url, auth, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Accept", "application/vnd.github+json")
		req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
		req.Header.Set("Authorization", auth)
		resp, err := s.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := do("POST", s.EnterpriseURL()+"/app/installations/34/access_tokens", "Bearer "+jwtTok, "")
	var issued struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal([]byte(body), &issued); code != 201 || err != nil || !s.Valid(issued.Token) {
		t.Fatalf("exchange under /api/v3: %d %s", code, body)
	}
	if code, body := do("GET", s.URL+"/user", "token "+issued.Token, ""); code != 403 || !strings.Contains(body, "Resource not accessible by integration") {
		t.Errorf("GET /user with an installation token: %d %s", code, body)
	}
	if code, body := do("POST", s.URL+"/repos/o/r/issues/1/comments", "Bearer "+issued.Token, `{"body":"hi"}`); code != 201 {
		t.Fatalf("comment with an installation token: %d %s", code, body)
	}
	if cs := s.Comments("o", "r", 1); len(cs) != 1 || cs[0].User.Login != "stackflow-preview[bot]" || cs[0].User.Type != "Bot" {
		t.Errorf("comment authored by %+v, want the App's bot", cs)
	}
	now = now.Add(s.TokenTTL)
	if code, body := do("POST", s.URL+"/repos/o/r/issues/1/comments", "Bearer "+issued.Token, `{"body":"late"}`); code != 401 || !strings.Contains(body, "Bad credentials") || s.Valid(issued.Token) {
		t.Errorf("comment with an expired installation token: %d %s", code, body)
	}
	if got := s.Calls(); got != 1 {
		t.Errorf("Calls() = %d, want the one exchange", got)
	}
}
