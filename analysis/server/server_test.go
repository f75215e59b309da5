package server

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/stackflow-io/stackflow/test/framework/logbuf"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stackflow-io/stackflow/analysis/stackcache"
	"github.com/stackflow-io/stackflow/analysis/verification"
	"github.com/stackflow-io/stackflow/internal/kubeauth"
	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/test/framework/leaks"
)

const sha = "0123456789abcdef0123456789abcdef01234567"

// source is an in-memory StackSource with a real Notifier.
type source struct {
	mu     sync.Mutex
	stacks map[types.NamespacedName]*pulumiv1.Stack
	n      *stackcache.Notifier
	synced bool
}

func newSource() *source {
	return &source{stacks: map[types.NamespacedName]*pulumiv1.Stack{}, n: stackcache.NewNotifier(), synced: true}
}

func (s *source) put(st *pulumiv1.Stack) {
	key := types.NamespacedName{Namespace: st.Namespace, Name: st.Name}
	s.mu.Lock()
	s.stacks[key] = st.DeepCopy()
	s.mu.Unlock()
	s.n.Notify(key)
}

func (s *source) Stack(_ context.Context, key types.NamespacedName) (*pulumiv1.Stack, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.stacks[key]; ok {
		return st.DeepCopy(), nil
	}
	return nil, nil
}
func (s *source) Update(context.Context, types.NamespacedName) *autov1alpha1.Update { return nil }
func (s *source) Watch(key types.NamespacedName) (<-chan struct{}, func())          { return s.n.Watch(key) }
func (s *source) Synced() bool                                                      { return s.synced }

// denied is an error that says only its status.
type denied struct{ code int }

func (d denied) Error() string   { return "caller \"bob\" cannot get stacks.pulumi.com" }
func (d denied) HTTPStatus() int { return d.code }

type guard struct{ err error }

func (g guard) Stack(*http.Request, string, string) error { return g.err }
func (g guard) Path(*http.Request, string) error          { return g.err }

func stackAt(state pulumiv1.StackUpdateStateMessage) *pulumiv1.Stack {
	s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: "dev", Name: "web", Generation: 2},
		Spec: pulumiv1.StackSpec{GitSource: &pulumiv1.GitSource{Commit: sha}}}
	s.Status.ObservedGeneration = 2
	if state != "" {
		s.Status.LastUpdate = &pulumiv1.StackUpdateState{Generation: 2, Name: "web-1", Type: autov1alpha1.UpType, State: state, LastAttemptedCommit: sha, Failures: 1}
	}
	return s
}

func newTestServer(t *testing.T, src *source, g Guard) (*httptest.Server, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(New(Options{Stacks: src, Guard: g, Registerer: reg, Gatherer: reg}))
	t.Cleanup(srv.Close)
	return srv, reg
}

func get(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: content type %q (%s)", url, ct, b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: body is not JSON: %s", url, b)
	}
	return resp.StatusCode, m
}

func TestRoutes(t *testing.T) {
	src := newSource()
	src.put(stackAt(pulumiv1.SucceededStackStateMessage))
	srv, reg := newTestServer(t, src, guard{})
	v := srv.URL + "/v1/namespaces/dev/stacks/web/verification"
	for _, tt := range []struct {
		path   string
		code   int
		phase  string
		reason string
	}{
		{v + "?commit=" + sha[:7], 200, "Succeeded", verification.ReasonUpdateSucceeded},
		{v + "?commit=" + sha + "&operation=preview", 200, "Failed", verification.ReasonOperationMismatch},
		{srv.URL + "/v1/namespaces/dev/stacks/other/verification?commit=" + sha, 200, "Pending", verification.ReasonStackNotFound},
		{srv.URL + "/v1/namespaces/dev/stacks/web", 200, "Succeeded", verification.ReasonUpdateSucceeded},
		{v + "?commit=xyz", 400, "", "BadRequest"},
		{v + "?commit=" + sha + "&operation=destroy", 400, "", "BadRequest"},
		{srv.URL + "/v1/namespaces/Dev_1/stacks/web/verification?commit=" + sha, 400, "", "BadRequest"},
		{srv.URL + "/v1/namespaces/dev/stacks/web?commit=" + sha, 400, "", "BadRequest"},
		{srv.URL + "/v1/pulumi/acme/web/dev/verification?commit=" + sha, 404, "", "NotFound"},
		{srv.URL + "/v2/anything", 404, "", "NotFound"},
	} {
		code, body := get(t, tt.path)
		if code != tt.code || body["reason"] != tt.reason || (tt.phase != "" && body["phase"] != tt.phase) {
			t.Errorf("GET %s: %d %v, want %d %s/%s", strings.TrimPrefix(tt.path, srv.URL), code, body, tt.code, tt.phase, tt.reason)
		}
		if tt.code != 200 && (body["message"] == "" || body["code"] != float64(tt.code)) {
			t.Errorf("GET %s: error body %v", tt.path, body)
		}
	}
	if got := testutil.ToFloat64(mustCounter(t, reg, "Succeeded", "200")); got != 2 {
		t.Errorf("stackflow_analysis_requests_total{phase=Succeeded,code=200} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(mustCounter(t, reg, "", "400")); got != 4 {
		t.Errorf("stackflow_analysis_requests_total{phase=,code=400} = %v, want 4", got)
	}
}

func mustCounter(t *testing.T, reg *prometheus.Registry, phase, code string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "stackflow_analysis_requests_total" {
			continue
		}
		for _, m := range mf.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["phase"] == phase && labels["code"] == code {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
				c.Add(m.Counter.GetValue())
				return c
			}
		}
	}
	t.Fatalf("no counter for phase=%q code=%q", phase, code)
	return nil
}

func TestGuardErrors(t *testing.T) {
	src := newSource()
	src.put(stackAt(pulumiv1.SucceededStackStateMessage))
	for _, tt := range []struct {
		err    error
		code   int
		reason string
	}{
		{denied{401}, 401, "Unauthorized"},
		{denied{403}, 403, "Forbidden"},
		{denied{503}, 503, "ServiceUnavailable"},
		{errors.New("boom"), 500, "InternalError"},
	} {
		srv, _ := newTestServer(t, src, guard{err: tt.err})
		code, body := get(t, srv.URL+"/v1/namespaces/dev/stacks/web/verification?commit="+sha)
		if code != tt.code || body["reason"] != tt.reason || body["phase"] != nil {
			t.Errorf("%v: %d %v", tt.err, code, body)
		}
		// A 4xx quotes the refusal; a 5xx never quotes an error.
		msg, _ := body["message"].(string)
		if quoted := strings.Contains(msg, tt.err.Error()); quoted != (tt.code < 500) {
			t.Errorf("%v: message %q", tt.err, msg)
		}
	}
}

// TestGuardFailureDetailOnlyInLog: when the TokenReview cannot be made (the
// API server's address refuses connections; its URL carries user info), the
// 503 says so in the service's own words with a request ID, and nothing of
// client-go's text: neither the API server's address, nor the user, nor the
// review's resource. The log has the error under that ID, user info masked.
// The Guard is the real kubeauth Authorizer.
func TestGuardFailureDetailOnlyInLog(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	apiServer := l.Addr().String()
	l.Close() // nothing listens there now
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "https://stackflow-analysis:hunter2-secret-value@" + apiServer, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	src := newSource()
	src.put(stackAt(pulumiv1.SucceededStackStateMessage))
	srv := httptest.NewServer(New(Options{Stacks: src, Guard: authGuard{kubeauth.New(kubeauth.Options{Client: cs, TTL: -1})}, Log: logs.Logger()}))
	t.Cleanup(srv.Close)

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/namespaces/dev/stacks/web/verification?commit="+sha, nil)
	req.Header.Set("Authorization", "Bearer a-caller-token-of-some-length")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	id, _ := body["requestID"].(string)
	if resp.StatusCode != http.StatusServiceUnavailable || body["reason"] != "ServiceUnavailable" || id == "" || resp.Header.Get("X-Request-Id") != id {
		t.Fatalf("HTTP %d %s, want 503 ServiceUnavailable with a request ID", resp.StatusCode, b)
	}
	leaks.AssertNone(t, []string{apiServer, "stackflow-analysis:", "hunter2-secret-value", "tokenreviews", "a-caller-token-of-some-length"},
		map[string]string{"the answer": string(b)})
	log := logs.String()
	if !strings.Contains(log, id) || !strings.Contains(log, apiServer) {
		t.Fatalf("the log lacks the request ID %s or the detail:\n%s", id, log)
	}
	leaks.AssertNone(t, []string{"stackflow-analysis:", "hunter2-secret-value", "a-caller-token-of-some-length"}, map[string]string{"the log": log})
	t.Logf("answer: %s", b)
}

// authGuard is the service's --auth=kube Guard.
type authGuard struct{ a *kubeauth.Authorizer }

func (g authGuard) Stack(r *http.Request, namespace, name string) error {
	_, err := g.a.Check(r, kubeauth.StackTarget(namespace, name))
	return err
}

func (g authGuard) Path(r *http.Request, path string) error {
	_, err := g.a.Check(r, kubeauth.PathTarget(path))
	return err
}

func TestMethodsAndBodies(t *testing.T) {
	srv, _ := newTestServer(t, newSource(), guard{})
	resp, err := http.Post(srv.URL+"/v1/namespaces/dev/stacks/web/verification?commit="+sha, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET" {
		t.Fatalf("POST: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/namespaces/dev/stacks/web", strings.NewReader(strings.Repeat("x", MaxRequestBytes+1)))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("large body: %d", resp.StatusCode)
	}
}

func TestReadyz(t *testing.T) {
	src := newSource()
	src.synced = false
	srv, _ := newTestServer(t, src, guard{})
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("readyz before sync: %d", resp.StatusCode)
	}
	src.mu.Lock()
	src.synced = true
	src.mu.Unlock()
	resp, err = http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz after sync: %d", resp.StatusCode)
	}
}

// A long poll returns as soon as the phase changes, not at the end of the
// wait.
func TestLongPollReturnsOnChange(t *testing.T) {
	src := newSource()
	src.put(stackAt(""))
	srv, _ := newTestServer(t, src, guard{})
	type answer struct {
		code int
		body map[string]any
		took time.Duration
	}
	done := make(chan answer, 1)
	go func() {
		start := time.Now()
		code, body := get(t, srv.URL+"/v1/namespaces/dev/stacks/web/verification?commit="+sha+"&wait=20s")
		done <- answer{code, body, time.Since(start)}
	}()
	// An unrelated change (same phase) does not end the poll; wait until the
	// request is parked on the Stack's key before changing it.
	waitFor(t, func() bool { return src.n.Waiting() == 1 })
	src.put(stackAt(""))
	waitFor(t, func() bool { return src.n.Waiting() == 1 })
	src.put(stackAt(pulumiv1.SucceededStackStateMessage))
	a := <-done
	if a.code != 200 || a.body["phase"] != "Succeeded" {
		t.Fatalf("long poll answered %d %v", a.code, a.body)
	}
	if a.took >= 20*time.Second {
		t.Fatalf("long poll took %s: it should return at the change", a.took)
	}
}

// Without a change the long poll answers at the end of the wait, with the
// same phase.
func TestLongPollTimesOut(t *testing.T) {
	src := newSource()
	src.put(stackAt(""))
	srv, _ := newTestServer(t, src, guard{})
	start := time.Now()
	code, body := get(t, srv.URL+"/v1/namespaces/dev/stacks/web/verification?commit="+sha+"&wait=1s")
	if code != 200 || body["phase"] != "Pending" || time.Since(start) < time.Second {
		t.Fatalf("%d %v after %s", code, body, time.Since(start))
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func httptestServer(t *testing.T, o Options) string {
	srv := httptest.NewServer(New(o))
	t.Cleanup(srv.Close)
	return srv.URL
}
