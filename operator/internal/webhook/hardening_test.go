package webhook

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"golang.org/x/time/rate"

	"github.com/stackflow-io/stackflow/test/framework/leaks"
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

// serve runs g behind NewServer with read and write timeouts far longer than
// any wait below: an answer that comes early comes from the handler.
func serve(t *testing.T, g *GitHub) string {
	t.Helper()
	srv := NewServer(g, Timeouts{ReadHeader: 10 * time.Second, Read: 60 * time.Second, Write: 60 * time.Second, Idle: 60 * time.Second})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// sendHead opens a connection and sends a request's head only: its body,
// if it declares one, is never sent unless the caller writes it.
func sendHead(t *testing.T, addr, head string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	return c
}

// answer reads the answer on c within d.
func answer(t *testing.T, c net.Conn, d time.Duration) (*http.Response, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer within %s: %v", d, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// fakeSig has the shape of a signature and matches nothing.
var fakeSig = "sha256=" + strings.Repeat("ab", 32)

// TestRefusedBeforeTheBodyIsRead: what the headers alone refuse (a missing or
// malformed signature header, a declared body over the cap, another method)
// is answered at once, without waiting for a body the client never sends:
// the server's read timeout is a minute, the client waits 5 seconds.
func TestRefusedBeforeTheBodyIsRead(t *testing.T) {
	addr := serve(t, &GitHub{Secret: []byte("webhook-secret"), OnPush: func(Push) error { t.Error("OnPush called"); return nil }})
	for _, tc := range []struct {
		name, head string
		code       int
		reason     string
	}{
		{"no signature", "POST /webhooks/github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\nContent-Length: 1000\r\n\r\n", 401, "SignatureMissing"},
		{"a signature of another shape", "POST /webhooks/github HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: sha1=abc\r\nContent-Length: 1000\r\n\r\n", 401, "SignatureMissing"},
		{"two signatures", "POST /webhooks/github HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: " + fakeSig + "\r\nX-Hub-Signature-256: " + fakeSig + "\r\nContent-Length: 1000\r\n\r\n", 401, "SignatureMissing"},
		{"a body over the cap", fmt.Sprintf("POST /webhooks/github HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: %s\r\nContent-Length: %d\r\n\r\n", fakeSig, DefaultMaxBody+1), 413, "RequestTooLarge"},
		{"GET with a body", "GET /webhooks/github HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n", 405, "MethodNotAllowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := answer(t, sendHead(t, addr, tc.head), 5*time.Second)
			if resp.StatusCode != tc.code || !strings.Contains(body, `"reason":"`+tc.reason+`"`) {
				t.Fatalf("HTTP %d %s, want %d %s", resp.StatusCode, body, tc.code, tc.reason)
			}
			if !resp.Close {
				t.Fatal("the connection is kept open after a refusal with a body left unread")
			}
		})
	}
}

// trickle sends a request declaring a 1,000-byte body with a signature of
// the right shape, then one byte of it every 100 ms until the connection
// fails.
func trickle(t *testing.T, addr string) net.Conn {
	t.Helper()
	c := sendHead(t, addr, "POST /webhooks/github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\nX-Hub-Signature-256: "+fakeSig+"\r\nContent-Length: 1000\r\n\r\n")
	go func() {
		for {
			if _, err := c.Write([]byte("x")); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return c
}

// waitUntil polls cond every 10 ms for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (g *GitHub) placesTaken() int { return len(g.places) }

// TestSlowBodiesDoNotStopAPush: clients trickling bodies in hold every
// place; a signed push arriving then waits and is accepted within seconds,
// as each slow client is cut off after BodyTimeout (408) rather than the
// server's read timeout of a minute.
func TestSlowBodiesDoNotStopAPush(t *testing.T) {
	secret := []byte("webhook-secret")
	pushed := make(chan Push, 1)
	g := &GitHub{Secret: secret, MaxConcurrent: 2, BodyTimeout: time.Second, OnPush: func(p Push) error { pushed <- p; return nil }}
	addr := serve(t, g)
	slow := []net.Conn{trickle(t, addr), trickle(t, addr)}
	waitUntil(t, "the slow clients to hold both places", func() bool { return g.placesTaken() == 2 })

	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/webhooks/github", strings.NewReader(pushBody))
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-Hub-Signature-256", Sign(secret, []byte(pushBody)))
	start := time.Now()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("the signed push: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the signed push: HTTP %d, want 202", resp.StatusCode)
	}
	t.Logf("the signed push was accepted after %s behind 2 slow clients", time.Since(start).Round(time.Millisecond))
	if p := <-pushed; p.Branch != "main" {
		t.Fatalf("push = %+v", p)
	}
	for i, c := range slow {
		if resp, body := answer(t, c, 10*time.Second); resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(body, "BodyTimeout") {
			t.Fatalf("slow client %d: HTTP %d %s, want 408 BodyTimeout", i, resp.StatusCode, body)
		}
	}
}

// TestExcessDeliveriesRefusedAtOnce: with every place taken and as many
// deliveries waiting, the next is answered 503 with Retry-After at once,
// not held.
func TestExcessDeliveriesRefusedAtOnce(t *testing.T) {
	secret := []byte("webhook-secret")
	g := &GitHub{Secret: secret, MaxConcurrent: 1, BodyTimeout: 30 * time.Second, OnPush: func(Push) error { return nil }}
	addr := serve(t, g)
	trickle(t, addr)
	waitUntil(t, "a slow client to hold the place", func() bool { return g.placesTaken() == 1 })
	trickle(t, addr)
	waitUntil(t, "a slow client to wait", func() bool { return g.waiting.Load() == 1 })

	c := sendHead(t, addr, fmt.Sprintf("POST /webhooks/github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: push\r\nX-Hub-Signature-256: %s\r\nContent-Length: %d\r\n\r\n%s",
		Sign(secret, []byte(pushBody)), len(pushBody), pushBody))
	resp, body := answer(t, c, 5*time.Second)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "30" || !strings.Contains(body, `"reason":"Busy"`) {
		t.Fatalf("HTTP %d (Retry-After %q) %s, want 503 Busy with Retry-After 30", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}

// TestFailureDetailOnlyInLog: when a push cannot be recorded, the answer
// says so with a request ID and nothing of the error (an API server's URL,
// a repository URL with credentials); the log has the error under that ID,
// credentials masked.
func TestFailureDetailOnlyInLog(t *testing.T) {
	secret := []byte("webhook-secret")
	var logs strings.Builder
	var mu sync.Mutex
	log := funcr.New(func(prefix, args string) { mu.Lock(); defer mu.Unlock(); logs.WriteString(prefix + " " + args + "\n") }, funcr.Options{})
	const apiServer = "https://10.96.0.1:443/apis/pulumi.com/v1/namespaces/team-a/stacks"
	const credential = "ghp_0123456789abcdefghij"
	g := &GitHub{Secret: secret, Log: log, OnPush: func(Push) error {
		return fmt.Errorf("record the push of https://x-access-token:%s@github.com/acme/infra.git: Patch %q: dial tcp 10.96.0.1:443: connect: connection refused", credential, apiServer)
	}}
	req := httptest.NewRequest(http.MethodPost, "/webhooks/github", strings.NewReader(pushBody))
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-Hub-Signature-256", Sign(secret, []byte(pushBody)))
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, req)
	var body struct{ Reason, Message, RequestID string }
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusServiceUnavailable || body.Reason != "PushNotRecorded" || body.RequestID == "" {
		t.Fatalf("HTTP %d %s (%v), want 503 PushNotRecorded with a request ID", rec.Code, rec.Body, err)
	}
	leaks.AssertNone(t, []string{apiServer, credential, "10.96.0.1:443"}, map[string]string{"the answer": rec.Body.String()})
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), body.RequestID) || !strings.Contains(logs.String(), "10.96.0.1:443") {
		t.Fatalf("the log lacks the request ID %s or the detail:\n%s", body.RequestID, logs.String())
	}
	leaks.AssertNone(t, []string{credential}, map[string]string{"the log": logs.String()})
}
