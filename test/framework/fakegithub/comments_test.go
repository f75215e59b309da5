package fakegithub

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

func do(t *testing.T, method, url, auth, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestServer(t *testing.T) {
	s := New(t, Options{})
	u := s.AddToken("t", "me", false)
	s.AddToken("ro", "fork", true)
	for i := range 5 {
		s.Seed("o", "r", 1, u, fmt.Sprint("c", i))
	}
	if resp, _ := do(t, "GET", s.URL+"/user", "", ""); resp.StatusCode != 401 {
		t.Errorf("no token: %d", resp.StatusCode)
	}
	if resp, body := do(t, "GET", s.URL+"/user", "token t", ""); resp.StatusCode != 200 || !strings.Contains(body, `"login":"me"`) {
		t.Errorf("GET /user: %d %s", resp.StatusCode, body)
	}
	// An installation token (the workflow's GITHUB_TOKEN) has no user.
	s.AddAppToken("ghs_installation", "github-actions[bot]", false)
	if resp, body := do(t, "GET", s.URL+"/user", "Bearer ghs_installation", ""); resp.StatusCode != 403 || !strings.Contains(body, "Resource not accessible by integration") {
		t.Errorf("GET /user with an installation token: %d %s", resp.StatusCode, body)
	}
	resp, body := do(t, "GET", s.EnterpriseURL()+"/repos/o/r/issues/1/comments?per_page=2&page=2", "Bearer t", "")
	var cs []map[string]any
	_ = json.Unmarshal([]byte(body), &cs)
	link := resp.Header.Get("Link")
	want := fmt.Sprintf(`<%s/api/v3/repos/o/r/issues/1/comments?page=3&per_page=2>; rel="next", <%s/api/v3/repos/o/r/issues/1/comments?page=3&per_page=2>; rel="last"`, s.URL, s.URL)
	if len(cs) != 2 || cs[0]["body"] != "c2" || !strings.Contains(link, want) || !strings.Contains(link, `rel="prev"`) {
		t.Errorf("page 2: %v\nLink: %s", cs, link)
	}
	if resp, body := do(t, "POST", s.URL+"/repos/o/r/issues/1/comments", "Bearer ro", `{"body":"x"}`); resp.StatusCode != 403 || !strings.Contains(body, "Resource not accessible by integration") {
		t.Errorf("read-only write: %d %s", resp.StatusCode, body)
	}
	long, _ := json.Marshal(map[string]string{"body": strings.Repeat("é", MaxBody+1)})
	if resp, body := do(t, "POST", s.URL+"/repos/o/r/issues/1/comments", "Bearer t", string(long)); resp.StatusCode != 422 || !strings.Contains(body, "too long") {
		t.Errorf("long body: %d %s", resp.StatusCode, body)
	}
	exact, _ := json.Marshal(map[string]string{"body": strings.Repeat("é", MaxBody)})
	if resp, _ := do(t, "POST", s.URL+"/repos/o/r/issues/1/comments", "Bearer t", string(exact)); resp.StatusCode != 201 {
		t.Errorf("body at the limit: %d", resp.StatusCode)
	}
	if resp, _ := do(t, "PATCH", s.URL+"/repos/o/r/issues/comments/99999", "Bearer t", `{"body":"x"}`); resp.StatusCode != 404 {
		t.Errorf("edit missing: %d", resp.StatusCode)
	}
	if resp, _ := do(t, "POST", s.URL+"/repos/o/r/statuses/abc", "Bearer t", `{"state":"success","context":"c"}`); resp.StatusCode != 201 || len(s.Statuses("o", "r", "abc")) != 1 {
		t.Errorf("status: %d", resp.StatusCode)
	}
	for _, n := range []int{MaxStatusContext, MaxStatusContext + 1} {
		ctx, _ := json.Marshal(map[string]string{"state": "success", "context": strings.Repeat("ü", n)})
		want := map[bool]int{true: 201, false: 422}[n <= MaxStatusContext]
		if resp, body := do(t, "POST", s.URL+"/repos/o/r/statuses/abc", "Bearer t", string(ctx)); resp.StatusCode != want {
			t.Errorf("context of %d characters: %d %s", n, resp.StatusCode, body)
		}
	}
}
