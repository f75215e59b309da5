package operator

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/stackflow-io/stackflow/operator/internal/artifact"
	"github.com/stackflow-io/stackflow/test/framework/leaks"
)

// TestServersHaveTimeouts: every server the operator runs bounds reading a
// request's headers, the whole request, writing the response and idle
// keep-alive connections (controller-runtime's own metrics and probe servers
// set no read or write timeout).
func TestServersHaveTimeouts(t *testing.T) {
	for name, srv := range map[string]*http.Server{
		"metrics and probes": newEndpointServer(http.NotFoundHandler()),
		"artifacts":          (&artifact.Store{}).NewServer(),
	} {
		if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 || srv.MaxHeaderBytes <= 0 {
			t.Errorf("%s: read header %s, read %s, write %s, idle %s, max header bytes %d: want all set",
				name, srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
		}
		if srv.ReadHeaderTimeout > srv.ReadTimeout {
			t.Errorf("%s: read header timeout %s exceeds the read timeout %s", name, srv.ReadHeaderTimeout, srv.ReadTimeout)
		}
	}
}

// TestServerErrorsDetailOnlyInLog: the metrics server's TokenReview fails
// (the API server's address, with user info, refuses connections), and a
// readiness check fails with an error naming internals. The metrics answer
// is 503 ServiceUnavailable and /readyz/<name> 500 NotReady, each in fixed
// words with a request ID; neither holds the error (client-go's text: the
// API server's address and user; the check's own). The manager's log has
// each under its request ID, user info masked.
func TestServerErrorsDetailOnlyInLog(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	apiServer := l.Addr().String()
	l.Close() // nothing listens there now
	var mu sync.Mutex
	var logs strings.Builder
	logger := funcr.New(func(prefix, args string) { mu.Lock(); defer mu.Unlock(); logs.WriteString(prefix + " " + args + "\n") }, funcr.Options{})
	mgr, err := ctrl.NewManager(&rest.Config{Host: "https://stackflow-operator:pw-0123456789abcdef@" + apiServer, Timeout: 5 * time.Second},
		ctrl.Options{Scheme: Scheme(), Logger: logger, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr, err := AddMetricsServer(mgr, MetricsOptions{Addr: "127.0.0.1:0", Auth: MetricsAuthKube})
	if err != nil {
		t.Fatal(err)
	}
	const checkDetail = "informer for pulumi.com/v1 Program: Get https://10.96.0.1:443/apis/pulumi.com/v1/programs: i/o timeout"
	probeAddr, err := AddProbeServer(mgr, "127.0.0.1:0", map[string]healthz.Checker{
		"program-cache": func(*http.Request) error { return errors.New(checkDetail) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the self-signed certificate made at start
	get := func(url string, header ...string) (*http.Response, string) {
		t.Helper()
		var resp *http.Response
		deadline := time.Now().Add(30 * time.Second)
		for {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			if len(header) == 2 {
				req.Header.Set(header[0], header[1])
			}
			if resp, err = client.Do(req); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %v", url, err)
			}
			time.Sleep(100 * time.Millisecond) // the server starts with the manager
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	for _, tc := range []struct {
		name, url, reason string
		header            []string
		code              int
		detail            []string
		logged            string
	}{
		{"metrics, TokenReview failed", "https://" + metricsAddr + "/metrics", "ServiceUnavailable", []string{"Authorization", "Bearer a-scraper-token-of-some-length"},
			http.StatusServiceUnavailable, []string{apiServer, "stackflow-operator:", "pw-0123456789abcdef", "tokenreviews", "a-scraper-token-of-some-length"}, apiServer},
		{"readiness check failed", "http://" + probeAddr + "/readyz/program-cache", "NotReady", nil,
			http.StatusInternalServerError, []string{checkDetail, "10.96.0.1:443"}, "10.96.0.1:443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(tc.url, tc.header...)
			var b struct{ Reason, Message, RequestID string }
			if err := json.Unmarshal([]byte(body), &b); err != nil || resp.StatusCode != tc.code || b.Reason != tc.reason || b.RequestID == "" {
				t.Fatalf("HTTP %d %s, want %d %s with a request ID", resp.StatusCode, body, tc.code, tc.reason)
			}
			leaks.AssertNone(t, tc.detail, map[string]string{"the answer": body})
			mu.Lock()
			defer mu.Unlock()
			if !strings.Contains(logs.String(), b.RequestID) || !strings.Contains(logs.String(), tc.logged) {
				t.Fatalf("the log lacks the request ID %s or the detail %s:\n%s", b.RequestID, tc.logged, logs.String())
			}
			leaks.AssertNone(t, []string{"stackflow-operator:", "pw-0123456789abcdef"}, map[string]string{"the log": logs.String()})
			t.Logf("answer: %s", body)
		})
	}
}
