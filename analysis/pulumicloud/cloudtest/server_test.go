package cloudtest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

const tok = "pul-test-token"

func get(t *testing.T, s *Server, path string, h map[string]string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+tok)
	req.Header.Set("Accept", "application/vnd.pulumi+8")
	req.Header.Set("Content-Type", "application/json")
	for k, v := range h {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("%s: not JSON: %s", path, b)
	}
	return resp.StatusCode, resp.Header, body
}

func updatesOf(t *testing.T, body map[string]any) []map[string]any {
	t.Helper()
	raw, ok := body["updates"].([]any)
	if !ok {
		t.Fatalf("no updates array: %v", body)
	}
	var out []map[string]any
	for _, r := range raw {
		out = append(out, r.(map[string]any))
	}
	return out
}

func TestAuthAndHeaders(t *testing.T) {
	s := NewTB(t, tok)
	s.AddStack("o", "p", "s")
	const path = "/api/stacks/o/p/s/updates"
	for name, c := range map[string]struct {
		h    map[string]string
		code int
	}{
		"ok":               {code: 200},
		"no token":         {h: map[string]string{"Authorization": ""}, code: 401},
		"wrong token":      {h: map[string]string{"Authorization": "token nope"}, code: 401},
		"bearer scheme":    {h: map[string]string{"Authorization": "Bearer " + tok}, code: 401},
		"empty token":      {h: map[string]string{"Authorization": "token "}, code: 401},
		"no Accept":        {h: map[string]string{"Accept": ""}, code: 406},
		"JSON Accept":      {h: map[string]string{"Accept": "application/json"}, code: 406},
		"unknown stack":    {code: 404},
		"wrong token, 404": {h: map[string]string{"Authorization": "token nope"}, code: 401},
	} {
		t.Run(name, func(t *testing.T) {
			p := path
			if strings.Contains(name, "404") || name == "unknown stack" {
				p = "/api/stacks/o/p/nope/updates"
			}
			code, _, body := get(t, s, p, c.h)
			if code != c.code {
				t.Fatalf("%d, want %d: %v", code, c.code, body)
			}
			if code != 200 && (body["code"] != float64(code) || body["message"] == "") {
				t.Errorf("error body %v", body)
			}
		})
	}
}

func TestListUpdates(t *testing.T) {
	s := NewTB(t, tok)
	for i, k := range []string{KindUpdate, KindPreview, KindRefresh, KindUpdate} {
		u := s.AddUpdate("o", "p", "s", Update{Kind: k, Result: ResultSucceeded, StartTime: int64(100 + i),
			Environment: map[string]string{"git.head": "abc"}, ResourceChanges: map[string]int{"create": 1}})
		if want := []int{1, 1, 2, 3}[i]; u.Version != want {
			t.Errorf("update %d: version %d, want %d", i, u.Version, want)
		}
	}
	// CLI format by default: flat AppUpdateInfo, newest first, no previews.
	code, _, body := get(t, s, "/api/stacks/o/p/s/updates", nil)
	ups := updatesOf(t, body)
	if code != 200 || len(ups) != 3 || ups[0]["kind"] != "update" || ups[0]["version"] != float64(3) || ups[1]["kind"] != "refresh" {
		t.Fatalf("cli: %d %v", code, body)
	}
	// Service format: UpdateInfo with info, paginated.
	_, _, body = get(t, s, "/api/stacks/o/p/s/updates?output-type=service&pageSize=2&page=1", nil)
	ups = updatesOf(t, body)
	if len(ups) != 2 || body["total"] != float64(3) || body["itemsPerPage"] != float64(2) {
		t.Fatalf("service: %v", body)
	}
	info := ups[0]["info"].(map[string]any)
	if info["kind"] != "update" || info["result"] != "succeeded" || ups[0]["version"] != float64(3) || ups[0]["updateID"] == "" ||
		info["environment"].(map[string]any)["git.head"] != "abc" || ups[0]["latestVersion"] != float64(3) {
		t.Errorf("service item %v", ups[0])
	}
	_, _, body = get(t, s, "/api/stacks/o/p/s/updates?output-type=service&pageSize=2&page=2", nil)
	if ups = updatesOf(t, body); len(ups) != 1 || ups[0]["version"] != float64(1) {
		t.Errorf("page 2: %v", body)
	}
	if code, _, _ := get(t, s, "/api/stacks/o/p/s/updates?pageSize=x", nil); code != 400 {
		t.Errorf("bad pageSize: %d", code)
	}
	// Latest update.
	code, _, body = get(t, s, "/api/stacks/o/p/s/updates/latest", nil)
	if code != 200 || body["version"] != float64(3) {
		t.Errorf("latest: %d %v", code, body)
	}
}

func TestPreviews(t *testing.T) {
	s := NewTB(t, tok)
	s.AddUpdate("o", "p", "s", Update{Kind: KindPreview, Result: ResultSucceeded, StartTime: 1}) // against version 0
	s.AddUpdate("o", "p", "s", Update{Kind: KindUpdate, Result: ResultSucceeded, StartTime: 2})  // version 1
	a := s.AddUpdate("o", "p", "s", Update{Kind: KindPreview, Result: ResultFailed, StartTime: 3})
	b := s.AddUpdate("o", "p", "s", Update{Kind: KindPupdate, Result: ResultSucceeded, StartTime: 4})
	_, _, body := get(t, s, "/api/stacks/o/p/s/updates/latest/previews", nil)
	ups := updatesOf(t, body)
	if len(ups) != 2 || ups[0]["updateID"] != b.UpdateID || ups[1]["updateID"] != a.UpdateID || body["total"] != float64(2) {
		t.Fatalf("latest previews (since the last update, newest first): %v", body)
	}
	_, _, body = get(t, s, "/api/stacks/o/p/s/updates/latest/previews?asc=true&pageSize=1&page=1", nil)
	if ups = updatesOf(t, body); len(ups) != 1 || ups[0]["updateID"] != a.UpdateID {
		t.Errorf("asc: %v", body)
	}
	_, _, body = get(t, s, "/api/stacks/o/p/s/updates/0/previews", nil)
	if ups = updatesOf(t, body); len(ups) != 1 {
		t.Errorf("version 0 previews: %v", body)
	}
	if !s.SetResult("o", "p", "s", a.UpdateID, ResultSucceeded, 9) || s.SetResult("o", "p", "s", "nope", ResultSucceeded, 9) {
		t.Error("SetResult")
	}
}

func TestFaults(t *testing.T) {
	s := NewTB(t, tok)
	s.AddStack("o", "p", "s")
	s.Inject(Fault{Status: 429, RetryAfter: "7", Count: 2})
	s.Inject(Fault{Status: 503})
	for i, want := range []int{429, 429, 503, 200} {
		code, h, _ := get(t, s, "/api/stacks/o/p/s/updates", map[string]string{"Authorization": "token wrong-but-faulted-first"})
		if i == 3 {
			want = 401 // faults come first; then the token is checked
		}
		if code != want {
			t.Errorf("request %d: %d, want %d", i, code, want)
		}
		if want == 429 && h.Get("Retry-After") != "7" {
			t.Errorf("Retry-After %q", h.Get("Retry-After"))
		}
	}
	s.Inject(Fault{Drop: true})
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/api/stacks/o/p/s/updates", nil)
	// A fresh connection: net/http retries a GET once on a reused one.
	fresh := &http.Client{Transport: &http.Transport{}}
	if resp, err := fresh.Do(req); err == nil {
		resp.Body.Close()
		t.Error("a dropped connection answered")
	}
	if s.Requests() != 5 || len(s.RequestLog()) != 5 || s.LastHeader() == nil {
		t.Errorf("%d requests", s.Requests())
	}
}
