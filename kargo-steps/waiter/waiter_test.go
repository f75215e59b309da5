package waiter

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stackflow-io/stackflow/analysis/server"
	"github.com/stackflow-io/stackflow/analysis/verification"
	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

const sha = "0123456789abcdef0123456789abcdef01234567"

// script serves one answer per request, the last one for ever; it records
// the requests.
type script struct {
	mu      sync.Mutex
	answers []func(w http.ResponseWriter)
	reqs    []*http.Request
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.reqs = append(s.reqs, r)
	a := s.answers[0]
	if len(s.answers) > 1 {
		s.answers = s.answers[1:]
	}
	s.mu.Unlock()
	a(w)
}

func phase(p verification.Phase, reason string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		_ = json.NewEncoder(w).Encode(verification.Result{Phase: p, Reason: reason, Message: string(p) + " message",
			Update: &verification.Update{Name: "web-3", Permalink: "file:///web/3"}, ObservedCommit: verification.NewCommit(sha)})
	}
}

func status(code int, reason string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(verification.Error{Code: code, Reason: reason, Message: "no access"})
	}
}

func options(url string) Options {
	return Options{URL: url, Namespace: "dev", Stack: "web", Commit: sha[:7], Operation: verification.OperationUp,
		Timeout: 20 * time.Second, Retry: 10 * time.Millisecond, Poll: time.Second}
}

func TestWait(t *testing.T) {
	for _, tt := range []struct {
		name      string
		answers   []func(http.ResponseWriter)
		timeout   time.Duration
		succeeded bool
		reason    string
		requests  int
	}{
		{"succeeds after pending and running", []func(http.ResponseWriter){phase("Pending", "CommitNotTargeted"), phase("Running", "UpdateInProgress"), phase("Succeeded", "UpdateSucceeded")}, 0, true, "UpdateSucceeded", 3},
		{"fails on Failed", []func(http.ResponseWriter){phase("Running", "RetryingAfterFailure"), phase("Failed", "StackStalled")}, 0, false, "StackStalled", 2},
		{"retries 503 and a restart", []func(http.ResponseWriter){status(503, "ServiceUnavailable"), status(502, "Bad Gateway"), phase("Succeeded", "UpdateSucceeded")}, 0, true, "UpdateSucceeded", 3},
		{"gives up at once on 403", []func(http.ResponseWriter){status(403, "Forbidden")}, 0, false, "Forbidden", 1},
		{"gives up at once on 401", []func(http.ResponseWriter){status(401, "Unauthorized")}, 0, false, "Unauthorized", 1},
		{"times out while pending", []func(http.ResponseWriter){phase("Pending", "AwaitingUpdate")}, 1500 * time.Millisecond, false, "Timeout", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &script{answers: tt.answers}
			srv := httptest.NewServer(s)
			defer srv.Close()
			o := options(srv.URL)
			if tt.timeout > 0 {
				o.Timeout = tt.timeout
			}
			out, err := Wait(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if out.Succeeded != tt.succeeded || out.Reason != tt.reason {
				t.Fatalf("outcome %+v", out)
			}
			if tt.requests > 0 && len(s.reqs) != tt.requests {
				t.Fatalf("%d requests, want %d", len(s.reqs), tt.requests)
			}
			if tt.reason == "Timeout" && !strings.Contains(out.Message, "last answer: Pending (AwaitingUpdate)") {
				t.Fatalf("timeout message %q", out.Message)
			}
			q := s.reqs[0].URL.Query()
			if s.reqs[0].URL.Path != "/v1/namespaces/dev/stacks/web/verification" || q.Get("commit") != sha[:7] || q.Get("operation") != "up" || q.Get("wait") != "1s" {
				t.Fatalf("request %s", s.reqs[0].URL)
			}
		})
	}
}

// The token is read from its file before every request (rotation).
func TestWaitReadsTheTokenEachTime(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter){phase("Pending", "AwaitingUpdate"), phase("Succeeded", "UpdateSucceeded")}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := options(srv.URL)
	o.TokenFile = file
	o.Progress = func(verification.Result) { _ = os.WriteFile(file, []byte("second"), 0o600) }
	if out, err := Wait(context.Background(), o); err != nil || !out.Succeeded {
		t.Fatalf("%+v %v", out, err)
	}
	if a, b := s.reqs[0].Header.Get("Authorization"), s.reqs[1].Header.Get("Authorization"); a != "Bearer first" || b != "Bearer second" {
		t.Fatalf("authorization headers %q, %q", a, b)
	}
}

func TestWaitOptions(t *testing.T) {
	for _, mod := range []func(*Options){
		func(o *Options) { o.URL = "stackflow-analysis:8080" },
		func(o *Options) { o.Stack = "" },
		func(o *Options) { o.Commit = "main" },
		func(o *Options) { o.Operation = "destroy" },
		func(o *Options) { o.Timeout = 0 },
	} {
		o := options("http://127.0.0.1:1")
		mod(&o)
		if _, err := Wait(context.Background(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// noStacks is a Stack source holding no Stack, for the real handler.
type noStacks struct{}

func (noStacks) Stack(context.Context, types.NamespacedName) (*pulumiv1.Stack, error) {
	return nil, nil
}
func (noStacks) Update(context.Context, types.NamespacedName) *autov1alpha1.Update { return nil }
func (noStacks) Watch(types.NamespacedName) (<-chan struct{}, func()) {
	return make(chan struct{}), func() {}
}
func (noStacks) Synced() bool { return true }

type allowAll struct{}

func (allowAll) Stack(*http.Request, string, string) error { return nil }
func (allowAll) Path(*http.Request, string) error          { return nil }

// TestWaitGivesUpOnAMissingStack: against the analysis service's handler,
// a wait for a Stack that does not exist ends Failed (StackNotFound) once
// NotFoundAfter has come, not at the timeout, even with a long poll that the
// service holds for 25 s (the grace ending wakes no waiter on its side).
func TestWaitGivesUpOnAMissingStack(t *testing.T) {
	srv := httptest.NewServer(server.New(server.Options{Stacks: noStacks{}, Guard: allowAll{}}))
	defer srv.Close()
	o := options(srv.URL)
	o.Poll, o.Timeout = verification.MaxWait, time.Minute
	start := time.Now()
	o.NotFoundAfter = start.Add(2 * time.Second)
	out, err := Wait(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if out.Succeeded || out.Result.Phase != verification.PhaseFailed || out.Reason != verification.ReasonStackNotFound || !strings.Contains(out.Message, "Stack dev/web does not exist") {
		t.Fatalf("outcome %+v", out)
	}
	// Seconds are what notFoundAfter carries; the last long poll ends a
	// second after it.
	if took < time.Second || took > 8*time.Second {
		t.Fatalf("the wait ended after %s, want about 2–3 s", took)
	}
	t.Logf("Failed %s after the start: %s", took.Round(10*time.Millisecond), out.Message)
}

func TestLongPoll(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(time.Hour))
	defer cancel()
	short, cancelShort := context.WithDeadline(context.Background(), now.Add(10*time.Second))
	defer cancelShort()
	for _, tt := range []struct {
		name          string
		ctx           context.Context
		notFoundAfter time.Time
		want          time.Duration
	}{
		{"no grace", ctx, time.Time{}, 25 * time.Second},
		{"grace far ahead", ctx, now.Add(time.Minute), 25 * time.Second},
		{"grace ends within the poll", ctx, now.Add(5 * time.Second), 6 * time.Second},
		{"grace over", ctx, now.Add(-time.Minute), 25 * time.Second},
		{"deadline first", short, now.Add(20 * time.Second), 9 * time.Second},
		{"grace before the deadline", short, now.Add(3 * time.Second), 4 * time.Second},
	} {
		o := Options{Poll: 25 * time.Second, NotFoundAfter: tt.notFoundAfter}
		if got := o.longPoll(tt.ctx, now); got != tt.want {
			t.Errorf("%s: long poll %s, want %s", tt.name, got, tt.want)
		}
	}
}

// gatedStack serves one Stack, dev/web, that requires approval and whose
// plan of commit 3f2a9c1 deletes a resource and awaits approval.
type gatedStack struct{ noStacks }

func (gatedStack) Stack(_ context.Context, key types.NamespacedName) (*pulumiv1.Stack, error) {
	if key.Namespace != "dev" || key.Name != "web" {
		return nil, nil
	}
	const sha = "3f2a9c1e0b4d5a6f7e8d9c0b1a2f3e4d5c6b7a89"
	s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: "dev", Name: "web", Generation: 2},
		Spec: pulumiv1.StackSpec{GitSource: &pulumiv1.GitSource{Commit: sha}, Approval: &pulumiv1.ApprovalPolicy{Required: true}}}
	s.Status.ObservedGeneration = 2
	s.Status.Plan = &pulumiv1.StackPlan{Fingerprint: strings.Repeat("ab", 32), State: pulumiv1.PlanAwaitingApproval, Summary: "+0 ~0 -1",
		Changes: map[string]int64{"delete": 1}, Commit: sha, Generation: 2, ExpiresAt: metav1.NewTime(time.Now().Add(time.Hour))}
	return s, nil
}

// TestWaitDeniesAPlan: with DenyOn, a wait on a Stack whose plan deletes
// ends at once Failed (PlanDenied), while without it the same wait keeps
// waiting for the approval (Pending) until its timeout.
func TestWaitDeniesAPlan(t *testing.T) {
	srv := httptest.NewServer(server.New(server.Options{Stacks: gatedStack{}, Guard: allowAll{}}))
	defer srv.Close()
	o := options(srv.URL)
	o.Commit = "3f2a9c1e0b4d5a6f7e8d9c0b1a2f3e4d5c6b7a89"
	o.Poll, o.Timeout = time.Second, 3*time.Second
	out, err := Wait(context.Background(), o)
	if err != nil || out.Succeeded || out.Reason != "Timeout" || out.Result.Reason != verification.ReasonAwaitingApproval {
		t.Fatalf("without denyOn: %+v, %v; want a timeout while awaiting approval", out, err)
	}
	o.DenyOn = []string{"delete"}
	out, err = Wait(context.Background(), o)
	if err != nil || out.Succeeded || out.Reason != verification.ReasonPlanDenied || !strings.Contains(out.Message, "1 to delete, which denyOn=delete refuses") {
		t.Fatalf("with denyOn delete: %+v, %v; want PlanDenied", out, err)
	}
}
