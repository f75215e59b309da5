package webhook

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/time/rate"
)

const pushBody = `{"ref":"refs/heads/main","repository":{"clone_url":"https://github.com/acme/infra.git","ssh_url":"git@github.com:acme/infra.git","html_url":"https://github.com/acme/infra"}}`

func TestGitHubReceiver(t *testing.T) {
	secret := []byte("webhook-secret")
	cases := []struct {
		name    string
		method  string
		event   string
		body    string
		sig     string
		want    int
		wantHit bool
	}{
		{"signed push", "POST", "push", pushBody, Sign(secret, []byte(pushBody)), http.StatusAccepted, true},
		{"unsigned push", "POST", "push", pushBody, "", http.StatusUnauthorized, false},
		{"wrong secret", "POST", "push", pushBody, Sign([]byte("other"), []byte(pushBody)), http.StatusUnauthorized, false},
		{"tampered body", "POST", "push", strings.Replace(pushBody, "main", "evil", 1), Sign(secret, []byte(pushBody)), http.StatusUnauthorized, false},
		{"sha1 signature only", "POST", "push", pushBody, "sha1=abc", http.StatusUnauthorized, false},
		{"bad hex", "POST", "push", pushBody, "sha256=zz", http.StatusUnauthorized, false},
		{"ping", "POST", "ping", `{"zen":"hi"}`, Sign(secret, []byte(`{"zen":"hi"}`)), http.StatusOK, false},
		{"other event", "POST", "issues", `{}`, Sign(secret, []byte(`{}`)), http.StatusNoContent, false},
		{"tag push", "POST", "push", `{"ref":"refs/tags/v1","repository":{"clone_url":"x"}}`, Sign(secret, []byte(`{"ref":"refs/tags/v1","repository":{"clone_url":"x"}}`)), http.StatusUnprocessableEntity, false},
		{"GET", "GET", "push", "", "", http.StatusMethodNotAllowed, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []Push
			g := &GitHub{Secret: secret, OnPush: func(p Push) error { got = append(got, p); return nil }}
			req := httptest.NewRequest(tc.method, "/webhooks/github", strings.NewReader(tc.body))
			req.Header.Set("X-GitHub-Event", tc.event)
			if tc.sig != "" {
				req.Header.Set("X-Hub-Signature-256", tc.sig)
			}
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Fatalf("status = %d, want %d (%s)", rec.Code, tc.want, rec.Body.String())
			}
			if tc.wantHit != (len(got) == 1) {
				t.Fatalf("pushes dispatched = %v, want %v", got, tc.wantHit)
			}
			if tc.wantHit && (got[0].Branch != "main" || len(got[0].RepoURLs) != 3) {
				t.Fatalf("push = %+v", got[0])
			}
		})
	}
}

func TestGitHubReceiverLimits(t *testing.T) {
	secret := []byte("s")
	big := bytes.Repeat([]byte("x"), 2048)
	g := &GitHub{Secret: secret, MaxBody: 1024}
	req := httptest.NewRequest("POST", "/", bytes.NewReader(big))
	req.Header.Set("X-Hub-Signature-256", Sign(secret, big))
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %d", rec.Code)
	}

	n := 0
	limited := &GitHub{Secret: secret, Limiter: rate.NewLimiter(0, 2), OnPush: func(Push) error { n++; return nil }}
	codes := []int{}
	for range 4 {
		req := httptest.NewRequest("POST", "/", strings.NewReader(pushBody))
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-Hub-Signature-256", Sign(secret, []byte(pushBody)))
		rec := httptest.NewRecorder()
		limited.ServeHTTP(rec, req)
		codes = append(codes, rec.Code)
	}
	if codes[0] != 202 || codes[1] != 202 || codes[2] != 429 || codes[3] != 429 || n != 2 {
		t.Fatalf("codes = %v, pushes = %d; want two accepted then 429", codes, n)
	}
	if (&GitHub{}).verify([]byte("x"), Sign(nil, []byte("x"))) {
		t.Fatal("an empty secret accepted a delivery")
	}
}

func FuzzParsePush(f *testing.F) {
	f.Add([]byte(pushBody))
	f.Add([]byte(`{"ref":"refs/heads/","repository":{}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, ok := parsePush(body)
		if ok && (p.Branch == "" || len(p.RepoURLs) == 0) {
			t.Fatalf("accepted push without branch or repository: %+v", p)
		}
	})
}
