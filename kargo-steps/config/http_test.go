package config

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stackflow-io/stackflow/analysis/server"
	"github.com/stackflow-io/stackflow/kargo-steps/kargoexpr"
	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// stacks is an in-memory StackSource for stackflow-analysis' handler.
type stacks map[types.NamespacedName]*pulumiv1.Stack

func (s stacks) Stack(_ context.Context, key types.NamespacedName) (*pulumiv1.Stack, error) {
	if st, ok := s[key]; ok {
		return st.DeepCopy(), nil
	}
	return nil, nil
}
func (stacks) Update(context.Context, types.NamespacedName) *autov1alpha1.Update { return nil }
func (stacks) Watch(types.NamespacedName) (<-chan struct{}, func()) {
	return make(chan struct{}), func() {}
}
func (stacks) Synced() bool { return true }

// denied is an authentication or authorisation failure of the guard.
type denied struct {
	code int
	msg  string
}

func (d denied) Error() string   { return d.msg }
func (d denied) HTTPStatus() int { return d.code }

// tokenGuard lets the token `token` read every Stack; a fixed code, when set,
// answers every request with it.
type tokenGuard struct{ code int }

func (g tokenGuard) check(r *http.Request) error {
	switch {
	case g.code == http.StatusForbidden:
		return denied{403, `system:serviceaccount:kargo-demo:stackflow-verifier cannot get stacks.pulumi.com "web" in namespace "dev"`}
	case g.code != 0:
		return denied{g.code, "denied"}
	case r.Header.Get("Authorization") != "Bearer "+token:
		return denied{401, "the bearer token was not accepted"}
	}
	return nil
}
func (g tokenGuard) Stack(r *http.Request, _, _ string) error { return g.check(r) }
func (g tokenGuard) Path(r *http.Request, _ string) error     { return g.check(r) }

var now = time.Now()

// stackAt builds a Stack dev/<name> pinned to commit at generation 3,
// observed, like analysis/verification's tests do.
func stackAt(name, commit string, mods ...func(*pulumiv1.Stack)) *pulumiv1.Stack {
	s := &pulumiv1.Stack{
		ObjectMeta: metav1.ObjectMeta{Namespace: "dev", Name: name, Generation: 3},
		Spec:       pulumiv1.StackSpec{GitSource: &pulumiv1.GitSource{Commit: commit}},
	}
	s.Status.ObservedGeneration = 3
	for _, m := range mods {
		m(s)
	}
	return s
}

func lastUpdate(state pulumiv1.StackUpdateStateMessage, failures int64) func(*pulumiv1.Stack) {
	return func(s *pulumiv1.Stack) {
		lu := &pulumiv1.StackUpdateState{
			Generation: 3, Name: s.Name + "-7", Type: autov1alpha1.UpType, State: state, LastAttemptedCommit: programSHA,
			LastResyncTime: metav1.NewTime(now.Add(-time.Minute)), Permalink: pulumiv1.Permalink("https://app.pulumi.com/acme/web/dev/updates/7"),
		}
		if state == pulumiv1.SucceededStackStateMessage {
			lu.LastSuccessfulCommit = programSHA
		} else {
			lu.Failures = failures
			lu.Message = "error: update failed"
		}
		s.Status.LastUpdate = lu
	}
}

func inFlight(s *pulumiv1.Stack) {
	s.Status.CurrentUpdate = &pulumiv1.CurrentStackUpdate{Name: s.Name + "-8", Commit: programSHA, Generation: 3, Number: 8, Purpose: pulumiv1.UpdatePurposeDeploy}
}

func stalled(s *pulumiv1.Stack) {
	s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{Type: pulumiv1.StalledCondition, Status: metav1.ConditionTrue,
		Reason: pulumiv1.StalledUpdateFailedReason, Message: "the update failed 5 times in a row", ObservedGeneration: 3})
}

// httpStep evaluates the http step of stackflow-promote for the Stack
// dev/<stackName>, against analysisURL, with a stackNotFoundGrace (the
// default when empty), and returns its evaluated config.
func httpStep(t *testing.T, analysisURL, stackName, grace string) map[string]any {
	t.Helper()
	st := withStageVars(t, stage(t, "dev"), map[string]string{"stackName": stackName})
	if grace != "" {
		st = withRefVars(t, st, map[string]string{"stackNotFoundGrace": grace})
	}
	runs, err := (&promotion{stage: st, tasks: allTasks(t), analysisURL: analysisURL,
		commits: []kargoexpr.Commit{{RepoURL: programRepo, ID: programSHA}}}).run(t)
	if err != nil {
		t.Fatal(err)
	}
	return byAlias(runs)["verify"].config
}

// send makes the request the http step makes from its config.
func send(t *testing.T, cfg map[string]any) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(str(cfg, "method"), str(cfg, "url"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range list(cfg, "headers") {
		req.Header.Add(str(h, "name"), str(h, "value"))
	}
	q := req.URL.Query()
	for _, p := range list(cfg, "queryParams") {
		q.Add(str(p, "name"), str(p, "value"))
	}
	req.URL.RawQuery = q.Encode()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// TestHTTPStepAgainstStackflowAnalysis evaluates the http step's expressions
// on live answers of stackflow-analysis' handler (and of a broken proxy):
// success only for Succeeded, failure only for Failed, neither (the step
// keeps polling) for the rest, and never an evaluation error (which Kargo
// counts as a step error).
func TestHTTPStepAgainstStackflowAnalysis(t *testing.T) {
	src := stacks{}
	for _, s := range []*pulumiv1.Stack{
		stackAt("other-commit", mergeSHA),
		stackAt("in-flight", programSHA, inFlight),
		stackAt("retrying", programSHA, lastUpdate(pulumiv1.FailedStackStateMessage, 2)),
		stackAt("web", programSHA, lastUpdate(pulumiv1.SucceededStackStateMessage, 0)),
		stackAt("stalled", programSHA, lastUpdate(pulumiv1.FailedStackStateMessage, 5), stalled),
	} {
		src[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] = s
	}
	serve := func(g tokenGuard) string {
		srv := httptest.NewServer(server.New(server.Options{Stacks: src, Guard: g}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	analysis, unauthorized, forbidden, unavailable := serve(tokenGuard{}), serve(tokenGuard{code: 401}), serve(tokenGuard{code: 403}), serve(tokenGuard{code: 503})
	proxy := func(code int, contentType, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", contentType)
			w.WriteHeader(code)
			_, _ = io.WriteString(w, body)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	const (
		polling = iota
		succeeds
		fails
	)
	for _, tt := range []struct {
		name, url, stack string
		code             int
		reason           string
		want             int
		grace            string
	}{
		{"Pending: no such Stack", analysis, "missing", 200, "StackNotFound", polling, ""},
		// The wait started stackNotFoundGrace ago: the Stack is given up on.
		{"Failed: no such Stack once the grace is over", analysis, "missing", 200, "StackNotFound", fails, "0s"},
		{"Pending: the Stack pins another commit", analysis, "other-commit", 200, "CommitNotTargeted", polling, ""},
		{"Running: update in flight", analysis, "in-flight", 200, "UpdateInProgress", polling, ""},
		{"Running: failed, retried", analysis, "retrying", 200, "RetryingAfterFailure", polling, ""},
		{"Succeeded", analysis, "web", 200, "UpdateSucceeded", succeeds, ""},
		{"Failed: stalled", analysis, "stalled", 200, "StackStalled", fails, ""},
		{"401", unauthorized, "web", 401, "Unauthorized", polling, ""},
		{"403", forbidden, "web", 403, "Forbidden", polling, ""},
		{"503 (TokenReview unavailable)", unavailable, "web", 503, "ServiceUnavailable", polling, ""},
		{"404 (wrong analysisURL path)", analysis + "/nowhere", "web", 404, "NotFound", polling, ""},
		{"502 HTML from a proxy", proxy(502, "text/html", "<html><body>Bad Gateway</body></html>"), "web", 502, "", polling, ""},
		{"502 text from a proxy", proxy(502, "text/plain", "upstream connect error"), "web", 502, "", polling, ""},
		{"200 text from something else", proxy(200, "text/plain", "Succeeded"), "web", 200, "", polling, ""},
		{"200 JSON array from something else", proxy(200, "application/json", `[{"phase":"Succeeded"}]`), "web", 200, "", polling, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := httpStep(t, tt.url, tt.stack, tt.grace)
			code, header, body := send(t, cfg)
			if code != tt.code {
				t.Fatalf("HTTP %d (%s), want %d", code, body, tt.code)
			}
			env, err := kargoexpr.HTTPEnv(code, header, body, str(cfg, "responseContentType"))
			if err != nil {
				t.Fatal(err)
			}
			if tt.reason != "" {
				if got := field(env, "response", "body", "reason"); got != tt.reason {
					t.Fatalf("answer %s, want reason %s", body, tt.reason)
				}
			}
			eval := func(which string) bool {
				t.Helper()
				v, err := kargoexpr.EvalPlain(str(cfg, which), env)
				if err != nil {
					t.Fatalf("%s: evaluation error on %s: %v", which, body, err)
				}
				b, ok := v.(bool)
				if !ok {
					t.Fatalf("%s gave %T, not a bool", which, v)
				}
				return b
			}
			success, failure := eval("successExpression"), eval("failureExpression")
			if success != (tt.want == succeeds) || failure != (tt.want == fails) {
				t.Errorf("success %v, failure %v on %d %s", success, failure, code, body)
			}
			if tt.want == fails {
				msg, err := kargoexpr.EvalPlain(str(cfg, "errorExpression"), env)
				want := []string{"StackStalled: ", "UpdateFailed"}
				if tt.reason == "StackNotFound" {
					want = []string{"StackNotFound: Stack dev/missing does not exist", "notFoundAfter"}
				}
				if s, _ := msg.(string); err != nil || !strings.HasPrefix(s, want[0]) || !strings.Contains(s, want[1]) {
					t.Errorf("errorExpression = %v, %v; want %q", msg, err, want)
				}
			}
			if tt.want == succeeds {
				got := map[string]any{}
				for _, o := range list(cfg, "outputs") {
					v, err := kargoexpr.EvalPlain(str(o, "fromExpression"), env)
					if err != nil {
						t.Fatalf("output %s: %v", str(o, "name"), err)
					}
					got[str(o, "name")] = v
				}
				if got["update"] != "web-7" || got["permalink"] != "https://app.pulumi.com/acme/web/dev/updates/7" {
					t.Errorf("outputs %v from %s", got, body)
				}
			}
		})
	}
}
