package webhook

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

func deliver(g *GitHub, id, sig string) int {
	req := httptest.NewRequest(http.MethodPost, "/webhooks/github", strings.NewReader(pushBody))
	req.Header.Set("X-GitHub-Event", "push")
	if id != "" {
		req.Header.Set("X-GitHub-Delivery", id)
	}
	if sig != "" {
		req.Header.Set("X-Hub-Signature-256", sig)
	}
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, req)
	return rec.Code
}

// TestUnsignedRequestsSpendNoBudget: a flood of unsigned requests neither
// uses the rate limit of real deliveries nor fills the delivery memory.
func TestUnsignedRequestsSpendNoBudget(t *testing.T) {
	secret := []byte("webhook-secret")
	d := &Deliveries{}
	g := &GitHub{Secret: secret, Limiter: rate.NewLimiter(0, 1), Deliveries: d, OnPush: func(Push) error { return nil }}
	for i := range 100 {
		if code := deliver(g, fmt.Sprintf("forged-%d", i), "sha256=00"); code != http.StatusUnauthorized {
			t.Fatalf("forged delivery %d: HTTP %d", i, code)
		}
	}
	if n := len(d.seen); n != 0 {
		t.Fatalf("forged deliveries remembered: %d", n)
	}
	if code := deliver(g, "real-1", Sign(secret, []byte(pushBody))); code != http.StatusAccepted {
		t.Fatalf("the real delivery after the flood: HTTP %d, want 202 (the burst of 1 was kept for it)", code)
	}
	if code := deliver(g, "real-2", Sign(secret, []byte(pushBody))); code != http.StatusTooManyRequests {
		t.Fatalf("a second real delivery beyond the limit: HTTP %d, want 429", code)
	}
	if code := deliver(g, "real-2", Sign(secret, []byte(pushBody))); code != http.StatusTooManyRequests {
		t.Fatalf("the rate-limited delivery was remembered as accepted: HTTP %d", code)
	}
}

func TestReplays(t *testing.T) {
	secret := []byte("webhook-secret")
	sig := Sign(secret, []byte(pushBody))
	fail := true
	pushes := 0
	g := &GitHub{Secret: secret, Deliveries: &Deliveries{}, OnPush: func(Push) error {
		pushes++
		if fail {
			return errors.New("API server unavailable")
		}
		return nil
	}}
	steps := []struct {
		what string
		id   string
		want int
	}{
		{"no delivery ID", "", http.StatusBadRequest},
		{"an oversized delivery ID", strings.Repeat("x", 129), http.StatusBadRequest},
		{"a delivery that could not be recorded", "d-1", http.StatusServiceUnavailable},
		{"its redelivery (same ID, now recorded)", "d-1", http.StatusAccepted},
		{"a replay of it", "d-1", http.StatusConflict},
		{"another delivery", "d-2", http.StatusAccepted},
	}
	for _, s := range steps {
		if s.what == "its redelivery (same ID, now recorded)" {
			fail = false
		}
		if got := deliver(g, s.id, sig); got != s.want {
			t.Fatalf("%s: HTTP %d, want %d", s.what, got, s.want)
		}
	}
	if pushes != 3 {
		t.Fatalf("OnPush called %d times, want 3 (the failed delivery, its redelivery, d-2)", pushes)
	}
}

func TestDeliveriesForget(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	d := &Deliveries{Window: time.Hour, Max: 3, Now: func() time.Time { return now }}
	for _, id := range []string{"a", "b", "c"} {
		if !d.reserve(id) {
			t.Fatalf("first %s refused", id)
		}
		now = now.Add(time.Minute)
	}
	if d.reserve("a") {
		t.Fatal("a replay within the window was accepted")
	}
	// The bound: a fourth ID forgets the oldest.
	if !d.reserve("d") || !d.reserve("a") {
		t.Fatal("after the bound, the oldest ID should be forgotten")
	}
	// Released (not accepted) and reserved again: one current entry.
	d.release("d")
	if !d.reserve("d") || d.reserve("d") {
		t.Fatal("a released ID is new once, then remembered")
	}
	// The window.
	now = now.Add(time.Hour)
	for _, id := range []string{"a", "c", "d"} {
		if !d.reserve(id) {
			t.Fatalf("%s refused after the window", id)
		}
	}
	if len(d.seen) > 3 || len(d.order) > 6 {
		t.Fatalf("memory not bounded: %d IDs, %d entries", len(d.seen), len(d.order))
	}
}

func TestExpired(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		after time.Duration
		want  bool
	}{{0, false}, {59 * time.Minute, false}, {time.Hour, true}, {2 * time.Hour, true}} {
		if got := expired(t0, t0.Add(tt.after), time.Hour); got != tt.want {
			t.Errorf("expired after %s = %v", tt.after, got)
		}
	}
}

// TestServerTimeouts: a client that dribbles its headers, or its body, is
// disconnected by the server (observed as the connection closing).
func TestServerTimeouts(t *testing.T) {
	srv := NewServer(&GitHub{Secret: []byte("s")}, Timeouts{ReadHeader: 200 * time.Millisecond, Read: 400 * time.Millisecond,
		Write: time.Second, Idle: time.Second})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	for _, tc := range []struct{ name, sent string }{
		{"slow headers", "POST /webhooks/github HTTP/1.1\r\nHost: x\r\n"},
		{"slow body", "POST /webhooks/github HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"ref\":"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, tc.sent); err != nil {
				t.Fatal(err)
			}
			// The client sends nothing more. The server must close the
			// connection; the deadline only keeps a broken server from
			// hanging the test.
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode < 400 {
					t.Fatalf("answered %d to a request that never completed", resp.StatusCode)
				}
				return // the server answered an error and closed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the server kept the connection open: %v", err)
			}
		})
	}
}
