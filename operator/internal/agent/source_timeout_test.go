package agent

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
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

	saved := artifactClient
	defer func() { artifactClient = saved }()
	artifactClient = newArtifactClient(time.Second, time.Second, 300*time.Millisecond, 2*time.Second)
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
