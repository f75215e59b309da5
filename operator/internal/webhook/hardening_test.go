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
	return deliverBody(g, id, pushBody, sig)
}

// pushOf is a push payload of its own: GitHub's always differ (commits,
// the repository's pushed_at).
func pushOf(n int) string {
	return strings.Replace(pushBody, `"ref"`, fmt.Sprintf(`"after":"%040d","ref"`, n), 1)
}

func deliverBody(g *GitHub, id, body, sig string) int {
	req := httptest.NewRequest(http.MethodPost, "/webhooks/github", strings.NewReader(body))
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
	second := pushOf(2)
	if code := deliverBody(g, "real-2", second, Sign(secret, []byte(second))); code != http.StatusTooManyRequests {
		t.Fatalf("a second real delivery beyond the limit: HTTP %d, want 429", code)
	}
	if code := deliverBody(g, "real-2", second, Sign(secret, []byte(second))); code != http.StatusTooManyRequests {
		t.Fatalf("the rate-limited delivery was remembered as accepted: HTTP %d", code)
	}
}

func TestReplays(t *testing.T) {
	secret := []byte("webhook-secret")
	fail := true
	pushes := 0
	g := &GitHub{Secret: secret, Deliveries: &Deliveries{}, OnPush: func(Push) error {
		pushes++
		if fail {
			return errors.New("API server unavailable")
		}
		return nil
	}}
	other := pushOf(2)
	steps := []struct {
		what string
		id   string
		body string
		want int
		say  string
	}{
		{"no delivery ID", "", pushBody, http.StatusBadRequest, "X-GitHub-Delivery"},
		{"an oversized delivery ID", strings.Repeat("x", 129), pushBody, http.StatusBadRequest, "X-GitHub-Delivery"},
		{"a delivery that could not be recorded", "d-1", pushBody, http.StatusServiceUnavailable, "redeliver"},
		{"its redelivery (same ID, now recorded)", "d-1", pushBody, http.StatusAccepted, ""},
		{"a replay of it", "d-1", pushBody, http.StatusConflict, "delivery d-1 was already accepted"},
		// X-GitHub-Delivery is not signed: a captured payload under a new
		// ID is a replay too.
		{"its payload under a new delivery ID", "forged-id", pushBody, http.StatusConflict, "this payload was already accepted as delivery d-1"},
		{"another delivery", "d-2", other, http.StatusAccepted, ""},
	}
	for _, s := range steps {
		if s.what == "its redelivery (same ID, now recorded)" {
			fail = false
		}
		sig := Sign(secret, []byte(s.body))
		req := httptest.NewRequest(http.MethodPost, "/webhooks/github", strings.NewReader(s.body))
		req.Header.Set("X-GitHub-Event", "push")
		if s.id != "" {
			req.Header.Set("X-GitHub-Delivery", s.id)
		}
		req.Header.Set("X-Hub-Signature-256", sig)
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, req)
		if rec.Code != s.want || !strings.Contains(rec.Body.String(), s.say) {
			t.Fatalf("%s: HTTP %d %q, want %d saying %q", s.what, rec.Code, rec.Body.String(), s.want, s.say)
		}
	}
	if pushes != 3 {
		t.Fatalf("OnPush called %d times, want 3 (the failed delivery, its redelivery, d-2)", pushes)
	}
}

func TestDeliveriesForget(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	d := &Deliveries{Window: time.Hour, Max: 3, Now: func() time.Time { return now }}
	reserve := func(id string) bool { ok, _ := d.reserve(id, "payload of "+id); return ok }
	for _, id := range []string{"a", "b", "c"} {
		if !reserve(id) {
			t.Fatalf("first %s refused", id)
		}
		now = now.Add(time.Minute)
	}
	if reserve("a") {
		t.Fatal("a replay within the window was accepted")
	}
	if ok, why := d.reserve("x", "payload of b"); ok || !strings.Contains(why, "as delivery b") {
		t.Fatalf("a payload replayed under a new ID: %v %q", ok, why)
	}
	// The bound: a fourth delivery forgets the oldest.
	if !reserve("d") || !reserve("a") {
		t.Fatal("after the bound, the oldest delivery should be forgotten")
	}
	// Released (not accepted) and reserved again: one current entry; its
	// payload is free again too.
	d.release("d", "payload of d")
	if ok, _ := d.reserve("d2", "payload of d"); !ok {
		t.Fatal("a released delivery's payload is still remembered")
	}
	d.release("d2", "payload of d")
	if !reserve("d") || reserve("d") {
		t.Fatal("a released ID is new once, then remembered")
	}
	d.release("d", "another payload") // not the delivery reserved: nothing
	if reserve("d") {
		t.Fatal("a release of another payload forgot the delivery")
	}
	// The window.
	now = now.Add(time.Hour)
	for _, id := range []string{"a", "c", "d"} {
		if !reserve(id) {
			t.Fatalf("%s refused after the window", id)
		}
	}
	if d.live > 3 || len(d.seen) > 6 || len(d.order) > 6 {
		t.Fatalf("memory not bounded: %d deliveries, %d keys, %d entries", d.live, len(d.seen), len(d.order))
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
