package artifact

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/stackflow-io/stackflow/test/framework/logbuf"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stackflow-io/stackflow/test/framework/leaks"
)

// objects stands for the cluster's objects as a replica's cache sees them:
// what Render rebuilds each object's artifact from.
type objects struct {
	mu    sync.Mutex
	files map[string]map[string][]byte // namespace/name → tarball files
	err   error                        // returned for every object when set
	calls []string
}

func (o *objects) set(ns, name string, files map[string][]byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if files == nil {
		delete(o.files, ns+"/"+name)
		return
	}
	o.files[ns+"/"+name] = files
}

func (o *objects) render(_ context.Context, kind, ns, name string) ([]byte, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, kind+"/"+ns+"/"+name)
	if o.err != nil {
		return nil, o.err
	}
	files, ok := o.files[ns+"/"+name]
	if kind != "programs" || !ok {
		return nil, fmt.Errorf("program %s/%s: %w", ns, name, fs.ErrNotExist)
	}
	return TarGz(files)
}

func get(t *testing.T, method, url string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// TestReplicasServeTheSameArtifact: two replicas' stores, one that published
// an artifact and one that did not (an empty directory, as a follower has);
// both answer its URL with the same bytes, as long as the object still renders
// to that digest.
func TestReplicasServeTheSameArtifact(t *testing.T) {
	objs := &objects{files: map[string]map[string][]byte{}}
	v1 := map[string][]byte{"Pulumi.yaml": []byte("name: web\nruntime: yaml\n")}
	objs.set("ns", "web", v1)

	var logs logbuf.Buffer
	leader := &Store{Dir: t.TempDir(), BaseURL: "http://leader", Render: objs.render}
	follower := &Store{Dir: t.TempDir(), BaseURL: "http://follower", Render: objs.render, Log: logs.Logger()}
	noDir := &Store{Render: objs.render}
	tarball, err := TarGz(v1)
	if err != nil {
		t.Fatal(err)
	}
	a, err := leader.Put("programs", "ns", "web", tarball)
	if err != nil {
		t.Fatal(err)
	}
	hexsum := strings.TrimPrefix(a.Digest, DigestPrefix)
	servers := map[string]*httptest.Server{}
	for name, s := range map[string]*Store{"leader": leader, "follower": follower, "no directory": noDir} {
		srv := httptest.NewServer(s.Handler())
		defer srv.Close()
		servers[name] = srv
	}

	for name, srv := range servers {
		resp, body := get(t, http.MethodGet, srv.URL+"/"+a.Path)
		if resp.StatusCode != http.StatusOK || !bytes.Equal(body, tarball) {
			t.Fatalf("%s: GET %s: HTTP %d, %d bytes; want 200 and the published %d bytes", name, a.Path, resp.StatusCode, len(body), len(tarball))
		}
		if et := resp.Header.Get("ETag"); et != `"`+hexsum+`"` {
			t.Errorf("%s: ETag = %q", name, et)
		}
		if ct := resp.Header.Get("Content-Type"); ct != ContentType {
			t.Errorf("%s: Content-Type = %q", name, ct)
		}
		resp, body = get(t, http.MethodGet, srv.URL+"/"+a.Path, "Range", "bytes=0-9")
		if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, tarball[:10]) {
			t.Fatalf("%s: range request: HTTP %d %x", name, resp.StatusCode, body)
		}
		resp, _ = get(t, http.MethodGet, srv.URL+"/"+a.Path, "If-None-Match", `"`+hexsum+`"`)
		if resp.StatusCode != http.StatusNotModified {
			t.Fatalf("%s: conditional GET: HTTP %d, want 304", name, resp.StatusCode)
		}
	}
	objs.mu.Lock()
	for _, c := range objs.calls {
		if c != "programs/ns/web" {
			t.Errorf("Render called for %q, want programs/ns/web", c)
		}
	}
	objs.calls = nil
	objs.mu.Unlock()

	// Paths that are not artifact paths never reach Render.
	for _, p := range []string{"/", "/programs/ns/web/", "/programs/../web/" + hexsum + ".tar.gz", "/programs/ns/web/" + strings.ToUpper(hexsum) + ".tar.gz"} {
		if resp, _ := get(t, http.MethodGet, servers["follower"].URL+p); resp.StatusCode != http.StatusNotFound {
			t.Errorf("follower: GET %s: HTTP %d, want 404", p, resp.StatusCode)
		}
	}
	if len(objs.calls) != 0 {
		t.Errorf("Render called for paths that are not artifacts: %q", objs.calls)
	}

	// The object changed: only the publisher still has the old content (until
	// it prunes it); the follower renders the new content, whose digest is not
	// the requested one.
	objs.set("ns", "web", map[string][]byte{"Pulumi.yaml": []byte("name: web\nruntime: yaml\nresources: {}\n")})
	if resp, _ := get(t, http.MethodGet, servers["leader"].URL+"/"+a.Path); resp.StatusCode != http.StatusOK {
		t.Errorf("leader: stored artifact: HTTP %d, want 200", resp.StatusCode)
	}
	if resp, body := get(t, http.MethodGet, servers["follower"].URL+"/"+a.Path); resp.StatusCode != http.StatusNotFound {
		t.Errorf("follower: artifact of a changed object: HTTP %d %q, want 404", resp.StatusCode, body)
	}

	// The object is gone.
	objs.set("ns", "web", nil)
	if resp, _ := get(t, http.MethodGet, servers["follower"].URL+"/"+a.Path); resp.StatusCode != http.StatusNotFound {
		t.Errorf("follower: artifact of a deleted object: HTTP %d, want 404", resp.StatusCode)
	}

	// The object cannot be read: 503, to be retried, without the error's text
	// (an API server's URL with credentials, say), which the log has under
	// the answer's request ID, credentials masked.
	objs.err = errors.New(`Get "https://operator:s3cr3t-t0ken-value@10.96.0.1:443/apis/pulumi.com/v1/namespaces/ns/programs/web": cache not synced`)
	resp, body := get(t, http.MethodGet, servers["follower"].URL+"/"+a.Path)
	id := resp.Header.Get("X-Request-Id")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || id == "" ||
		!bytes.Contains(body, []byte(`"reason":"ServiceUnavailable"`)) || !bytes.Contains(body, []byte(id)) {
		t.Errorf("follower: unreadable object: HTTP %d (Retry-After %q, request ID %q) %s, want 503 ServiceUnavailable with Retry-After and a request ID",
			resp.StatusCode, resp.Header.Get("Retry-After"), id, body)
	}
	leaks.AssertNone(t, []string{"s3cr3t-t0ken-value", "10.96.0.1:443"}, map[string]string{"the answer": string(body)})
	if l := logs.String(); !strings.Contains(l, id) || !strings.Contains(l, "10.96.0.1:443") {
		t.Errorf("the log lacks the request ID %s or the detail:\n%s", id, l)
	}
	leaks.AssertNone(t, []string{"s3cr3t-t0ken-value"}, map[string]string{"the log": logs.String()})
	// The publisher serves its file without asking.
	if resp, _ := get(t, http.MethodGet, servers["leader"].URL+"/"+a.Path); resp.StatusCode != http.StatusOK {
		t.Errorf("leader: stored artifact while objects are unreadable: HTTP %d, want 200", resp.StatusCode)
	}
}
