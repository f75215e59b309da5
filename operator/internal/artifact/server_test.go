package artifact

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// secret is the content of a file next to the store's directory, which no
// request may ever read.
const secret = "outside-the-store"

// servedStore is a store holding two artifacts, with a secret file beside its
// directory and a symbolic link inside it, shaped like an artifact, that leads
// to the secret.
type servedStore struct {
	*Store
	// artifacts maps each artifact's request path to its content.
	artifacts map[string][]byte
	// link is the request path of the symbolic link.
	link string
}

func newServedStore(t testing.TB) *servedStore {
	t.Helper()
	parent := t.TempDir()
	s := &Store{Dir: filepath.Join(parent, "artifacts"), BaseURL: "http://unused"}
	ss := &servedStore{Store: s, artifacts: map[string][]byte{}}
	for _, c := range []struct{ name, content string }{{"web", "tarball web"}, {"api", "tarball api"}} {
		a, err := s.Put("programs", "ns", c.name, []byte(c.content))
		if err != nil {
			t.Fatal(err)
		}
		ss.artifacts["/"+a.Path] = []byte(c.content)
	}
	if err := os.WriteFile(filepath.Join(parent, "secret"), []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	// The secret also sits where an artifact path would point if segments were
	// not checked: <parent>/programs/ns/x/<hex>.tar.gz reached through "..".
	esc := filepath.Join(parent, "programs", "ns", "x")
	if err := os.MkdirAll(esc, 0o755); err != nil {
		t.Fatal(err)
	}
	hexsum := strings.TrimPrefix(Digest([]byte(secret)), DigestPrefix)
	if err := os.WriteFile(filepath.Join(esc, hexsum+".tar.gz"), []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	linkDir := filepath.Join(s.Dir, "programs", "ns", "evil")
	if err := os.MkdirAll(linkDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(parent, "secret"), filepath.Join(linkDir, hexsum+".tar.gz")); err != nil {
		t.Fatal(err)
	}
	ss.link = "/programs/ns/evil/" + hexsum + ".tar.gz"
	return ss
}

// rawRequest sends target verbatim (no client-side cleaning or escaping) and
// returns the response.
func rawRequest(t testing.TB, addr, method, target string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: artifacts\r\nConnection: close\r\n\r\n", method, target); err != nil {
		t.Fatal(err)
	}
	req := &http.Request{Method: method}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func TestHandlerServesArtifacts(t *testing.T) {
	ss := newServedStore(t)
	srv := httptest.NewServer(ss.Handler())
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	var web string
	for p, c := range ss.artifacts {
		if string(c) == "tarball web" {
			web = p
		}
	}
	webHex := strings.TrimSuffix(filepath.Base(web), ".tar.gz")
	unknown := "/programs/ns/web/" + strings.Repeat("0", 64) + ".tar.gz"

	for _, tc := range []struct {
		name, method, target string
		status               int
		body                 string
	}{
		{"get", http.MethodGet, web, http.StatusOK, "tarball web"},
		{"head", http.MethodHead, web, http.StatusOK, ""},
		{"unknown digest", http.MethodGet, unknown, http.StatusNotFound, ""},
		{"unknown object", http.MethodGet, "/programs/ns/nope/" + webHex + ".tar.gz", http.StatusNotFound, ""},
		{"root listing", http.MethodGet, "/", http.StatusNotFound, ""},
		{"kind listing", http.MethodGet, "/programs/", http.StatusNotFound, ""},
		{"object listing", http.MethodGet, "/programs/ns/web/", http.StatusNotFound, ""},
		{"object listing without slash", http.MethodGet, "/programs/ns/web", http.StatusNotFound, ""},
		{"trailing slash", http.MethodGet, web + "/", http.StatusNotFound, ""},
		{"double slash", http.MethodGet, "/programs//ns/web/" + webHex + ".tar.gz", http.StatusNotFound, ""},
		{"dot segment", http.MethodGet, "/programs/./ns/web/" + webHex + ".tar.gz", http.StatusNotFound, ""},
		{"uppercase digest", http.MethodGet, "/programs/ns/web/" + strings.ToUpper(webHex) + ".tar.gz", http.StatusNotFound, ""},
		{"traversal", http.MethodGet, "/../secret", http.StatusNotFound, ""},
		{"traversal in segment", http.MethodGet, "/programs/../../secret", http.StatusNotFound, ""},
		{"traversal to a shaped file", http.MethodGet, "/../programs/ns/x/" + strings.TrimPrefix(Digest([]byte(secret)), DigestPrefix) + ".tar.gz", http.StatusNotFound, ""},
		{"traversal as namespace", http.MethodGet, "/programs/../x/" + strings.TrimPrefix(Digest([]byte(secret)), DigestPrefix) + ".tar.gz", http.StatusNotFound, ""},
		{"encoded traversal", http.MethodGet, "/%2e%2e/secret", http.StatusNotFound, ""},
		{"encoded traversal as namespace", http.MethodGet, "/programs/%2e%2e/x/" + strings.TrimPrefix(Digest([]byte(secret)), DigestPrefix) + ".tar.gz", http.StatusNotFound, ""},
		{"encoded slashes", http.MethodGet, "/%2e%2e%2fsecret", http.StatusNotFound, ""},
		{"double-encoded traversal", http.MethodGet, "/%252e%252e/secret", http.StatusNotFound, ""},
		{"backslash traversal", http.MethodGet, `/programs/..\..\secret`, http.StatusNotFound, ""},
		{"absolute form", http.MethodGet, "http://artifacts/../secret", http.StatusNotFound, ""},
		{"symbolic link out of the store", http.MethodGet, ss.link, http.StatusNotFound, ""},
		{"post", http.MethodPost, web, http.StatusMethodNotAllowed, ""},
		{"delete", http.MethodDelete, web, http.StatusMethodNotAllowed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawRequest(t, addr, tc.method, tc.target)
			if resp.StatusCode != tc.status {
				t.Fatalf("%s %s: HTTP %d, want %d (body %q)", tc.method, tc.target, resp.StatusCode, tc.status, body)
			}
			if bytes.Contains(body, []byte(secret)) {
				t.Fatalf("%s %s: served the secret outside the store", tc.method, tc.target)
			}
			if tc.status != http.StatusOK {
				return
			}
			if string(body) != tc.body {
				t.Fatalf("body = %q, want %q", body, tc.body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/gzip" {
				t.Errorf("Content-Type = %q", ct)
			}
			if et := resp.Header.Get("ETag"); et != `"`+webHex+`"` {
				t.Errorf("ETag = %q", et)
			}
			if cl := resp.Header.Get("Content-Length"); cl != fmt.Sprint(len("tarball web")) {
				t.Errorf("Content-Length = %q", cl)
			}
		})
	}

	// A conditional request with the ETag is answered without the body.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+web, nil)
	req.Header.Set("If-None-Match", `"`+webHex+`"`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotModified {
		t.Fatalf("conditional GET: HTTP %d, want 304", resp.StatusCode)
	}
}

func TestHandlerWithoutDirectory(t *testing.T) {
	for _, s := range []*Store{{}, {Dir: filepath.Join(t.TempDir(), "missing")}} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/programs/ns/web/"+strings.Repeat("a", 64)+".tar.gz", nil))
		if rec.Code != http.StatusNotFound {
			t.Errorf("store %q: HTTP %d, want 404", s.Dir, rec.Code)
		}
	}
}

func TestServeStopsWithContext(t *testing.T) {
	ss := newServedStore(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if ss.Serving() == nil {
		t.Fatal("Serving reports ready before Serve started")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ss.Serve(ctx, l) }()
	for p, want := range ss.artifacts {
		resp, err := http.Get("http://" + l.Addr().String() + p)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Equal(body, want) {
			t.Fatalf("GET %s: HTTP %d %q", p, resp.StatusCode, body)
		}
	}
	if err := ss.Serving(); err != nil {
		t.Fatalf("Serving after answering requests: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return after the context ended")
	}
	if _, err := net.DialTimeout("tcp", l.Addr().String(), time.Second); err == nil {
		t.Fatal("still listening after the context ended")
	}
	if ss.Serving() == nil {
		t.Fatal("Serving reports ready after Serve returned")
	}
}

// FuzzHandlerPath: whatever the request target, the handler serves only the
// store's artifacts, each at its own path, and never anything outside Dir.
func FuzzHandlerPath(f *testing.F) {
	ss := newServedStore(f)
	h := ss.Handler()
	for p := range ss.artifacts {
		f.Add(p)
		f.Add(strings.ReplaceAll(p, "/", "%2f"))
		f.Add(strings.Replace(p, "/ns/", "/ns/../ns/", 1))
	}
	for _, seed := range []string{
		"/", "/../secret", "/%2e%2e/secret", "/%2e%2e%2fsecret", "/programs/ns/x/../../../secret",
		"/programs/%2e%2e/%2e%2e/secret", "//secret", "/programs/ns/evil/", ss.link,
		"/programs/ns/x/" + strings.TrimPrefix(Digest([]byte(secret)), DigestPrefix) + ".tar.gz",
		"/../programs/ns/x/" + strings.TrimPrefix(Digest([]byte(secret)), DigestPrefix) + ".tar.gz",
		`/..\secret`, "/programs/ns/web/%00", "*", "http://h/../secret",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, target string) {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: h\r\n\r\n")))
		if err != nil {
			return // the server would refuse it before any handler runs
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		body := rec.Body.Bytes()
		if bytes.Contains(body, []byte(secret)) {
			t.Fatalf("target %q served the secret outside the store", target)
		}
		if rec.Code != http.StatusOK {
			return
		}
		want, ok := ss.artifacts[req.URL.Path]
		if !ok {
			t.Fatalf("target %q (path %q) served something that is not an artifact: %q", target, req.URL.Path, body)
		}
		if !bytes.Equal(body, want) {
			t.Fatalf("target %q served %q, want %q", target, body, want)
		}
	})
}
