package agent

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stackflow-io/stackflow/operator/internal/artifact"
)

// TestArtifactDownloadTimesOut: a server that never answers, or stops sending
// the body, fails the fetch within the client's timeouts instead of hanging.
func TestArtifactDownloadTimesOut(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	mux := http.NewServeMux()
	mux.HandleFunc("/silent", func(http.ResponseWriter, *http.Request) { <-release })
	mux.HandleFunc("/stalled", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("partial"))
		w.(http.Flusher).Flush()
		<-release
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()

	saved, savedDelays := artifactClient, artifactRetryDelays
	defer func() { artifactClient, artifactRetryDelays = saved, savedDelays }()
	artifactClient = newArtifactClient(time.Second, time.Second, 300*time.Millisecond, 2*time.Second)
	artifactRetryDelays = []time.Duration{10 * time.Millisecond}
	digest := "sha256:" + strings.Repeat("0", 64)
	for _, tc := range []struct{ path, want string }{
		{"/silent", "timeout awaiting response headers"},
		{"/stalled", "Client.Timeout"},
	} {
		start := time.Now()
		_, err := fetchArtifact(context.Background(), Source{ArtifactURL: "http://" + l.Addr().String() + tc.path, ArtifactDigest: digest}, t.TempDir())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: fetch = %v, want an error containing %q", tc.path, err, tc.want)
		}
		if d := time.Since(start); d > time.Minute {
			t.Fatalf("%s: the fetch took %s", tc.path, d)
		}
	}
	if artifactClient.Timeout == 0 || saved.Timeout != ArtifactDownloadTimeout ||
		saved.Transport.(*http.Transport).ResponseHeaderTimeout != ArtifactHeaderTimeout {
		t.Fatalf("the agent's artifact client lacks its timeouts: %+v", saved)
	}
}

// TestArtifactDownloadRetries: answers that may pass (404 from a replica whose
// cache lags, 503, a 5xx) are retried; a refusal (403) is not; the error
// names the attempts and the last answer.
func TestArtifactDownloadRetries(t *testing.T) {
	tarball, err := artifact.TarGz(map[string][]byte{"Pulumi.yaml": []byte("name: p\nruntime: yaml\n")})
	if err != nil {
		t.Fatal(err)
	}
	digest := artifact.Digest(tarball)
	var mu sync.Mutex
	answers := map[string][]int{}
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n := seen[r.URL.Path]
		seen[r.URL.Path]++
		plan := answers[r.URL.Path]
		mu.Unlock()
		code := http.StatusOK
		if n < len(plan) {
			code = plan[n]
		} else if len(plan) > 0 && plan[len(plan)-1] != http.StatusOK {
			code = plan[len(plan)-1] // the last answer repeats
		}
		if code != http.StatusOK {
			http.Error(w, "no", code)
			return
		}
		_, _ = w.Write(tarball)
	}))
	defer srv.Close()
	savedDelays := artifactRetryDelays
	defer func() { artifactRetryDelays = savedDelays }()
	artifactRetryDelays = []time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}

	for _, tc := range []struct {
		name     string
		plan     []int
		requests int
		wantErr  string
	}{
		{"lagging replica then unavailable then found", []int{404, 503, 200}, 3, ""},
		{"bad gateway once", []int{502, 200}, 2, ""},
		{"always missing", []int{404}, 4, "(4 attempts): HTTP 404 Not Found"},
		{"forbidden", []int{403}, 1, "(1 attempts): HTTP 403 Forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/" + strings.ReplaceAll(tc.name, " ", "-")
			mu.Lock()
			answers[path] = tc.plan
			mu.Unlock()
			root := t.TempDir()
			f, err := fetchArtifact(context.Background(), Source{ArtifactURL: srv.URL + path, ArtifactDigest: digest}, root)
			mu.Lock()
			got := seen[path]
			mu.Unlock()
			if got != tc.requests {
				t.Errorf("%d requests, want %d", got, tc.requests)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("fetch = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(f.ProgramDir, "Pulumi.yaml")); err != nil || f.Revision != digest {
				t.Fatalf("fetched %+v: %v", f, err)
			}
		})
	}
}
