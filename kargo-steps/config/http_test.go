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
	refVars := map[string]string{}
	if grace != "" {
		refVars["stackNotFoundGrace"] = grace
	}
	return httpStepAs(t, "verify", analysisURL, stackName, refVars)
}

// httpStepAs evaluates stackflow-promote's http step of alias as (plan,
// approval or verify) with the task reference's vars refVars.
func httpStepAs(t *testing.T, as, analysisURL, stackName string, refVars map[string]string) map[string]any {
	t.Helper()
	st := withStageVars(t, stage(t, "dev"), map[string]string{"stackName": stackName})
	if len(refVars) > 0 {
		st = withRefVars(t, st, refVars)
	}
	// The plan step's outputs run the approval step only for a plan
	// awaiting approval: the other steps are answered so.
	runs, err := (&promotion{stage: st, tasks: allTasks(t), analysisURL: analysisURL, answer: awaitingAnswer,
		commits: []kargoexpr.Commit{{RepoURL: programRepo, ID: programSHA}}}).run(t)
	if err != nil {
		t.Fatal(err)
	}
	r := byAlias(runs)[as]
	if r.skipped {
		t.Fatalf("step %s skipped", as)
	}
	return r.config
}

// awaitingAnswer is an answer of stackflow-analysis for a plan awaiting
// approval.
const awaitingAnswer = `{"phase":"Pending","reason":"AwaitingApproval","message":"awaiting approval: +1 ~0 -0, plan 3f9a0c1d2e4b","operation":"up",
 "plan":{"fingerprint":"3f9a0c1d2e4b5a6978c0d1e2f3a4b5c6d7e8f90112233445566778899aabbccd","state":"AwaitingApproval","summary":"+1 ~0 -0"}}`

// evalStep evaluates an http step's success and failure expressions, and
// its error message and outputs, on an answer.
func evalStep(t *testing.T, cfg map[string]any, code int, header http.Header, body []byte) (success, failure bool, message string, outputs map[string]any) {
	t.Helper()
	env, err := kargoexpr.HTTPEnv(code, header, body, str(cfg, "responseContentType"))
	if err != nil {
		t.Fatal(err)
	}
	eval := func(expr string) any {
		t.Helper()
		v, err := kargoexpr.EvalPlain(expr, env)
		if err != nil {
			t.Fatalf("evaluation error of %s on %s: %v", expr, body, err)
		}
		return v
	}
	success, _ = eval(str(cfg, "successExpression")).(bool)
	failure, _ = eval(str(cfg, "failureExpression")).(bool)
	if failure {
		message, _ = eval(str(cfg, "errorExpression")).(string)
	}
	if success {
		outputs = map[string]any{}
		for _, o := range list(cfg, "outputs") {
			outputs[str(o, "name")] = eval(str(o, "fromExpression"))
		}
	}
	return success, failure, message, outputs
}

// TestPlanAndApprovalSteps evaluates the plan and approval steps of
// stackflow-promote on live answers of stackflow-analysis for Stacks that
// require approval: the plan step succeeds once a plan awaits approval,
// with its summary and fingerprint as outputs, while the approval step
// polls until the plan is approved and applying; a rejected or stale plan,
// or one denied by denyOn, fails the step with the reason.
func TestPlanAndApprovalSteps(t *testing.T) {
	const fp = "3f9a0c1d2e4b5a6978c0d1e2f3a4b5c6d7e8f90112233445566778899aabbccd"
	gated := func(s *pulumiv1.Stack) { s.Spec.Approval = &pulumiv1.ApprovalPolicy{Required: true} }
	plan := func(state pulumiv1.PlanState, changes map[string]int64) func(*pulumiv1.Stack) {
		return func(s *pulumiv1.Stack) {
			s.Status.Plan = &pulumiv1.StackPlan{Fingerprint: fp, State: state, Summary: "+1 ~0 -1", Changes: changes,
				Commit: programSHA, Generation: 3, ExpiresAt: metav1.NewTime(now.Add(24 * time.Hour))}
		}
	}
	making := func(s *pulumiv1.Stack) {
		s.Status.CurrentUpdate = &pulumiv1.CurrentStackUpdate{Name: s.Name + "-8", Commit: programSHA, Generation: 3, Number: 8, Purpose: pulumiv1.UpdatePurposePlan}
	}
	rejected := func(s *pulumiv1.Stack) {
		s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{Type: pulumiv1.StalledCondition, Status: metav1.ConditionTrue,
			Reason: pulumiv1.StalledPlanRejectedReason, Message: "plan rejected by alice", ObservedGeneration: 3})
	}
	stale := func(s *pulumiv1.Stack) {
		lastUpdate(pulumiv1.FailedStackStateMessage, 1)(s)
		s.Status.LastUpdate.Message = "resource urn:pulumi:dev::web::rec violates plan: properties changed"
	}
	adds := map[string]int64{"create": 1}
	deletes := map[string]int64{"create": 1, "delete": 1}
	src := stacks{}
	for _, s := range []*pulumiv1.Stack{
		stackAt("making", programSHA, gated, making),
		stackAt("awaiting", programSHA, gated, plan(pulumiv1.PlanAwaitingApproval, adds)),
		stackAt("deleting", programSHA, gated, plan(pulumiv1.PlanAwaitingApproval, deletes)),
		stackAt("applying", programSHA, gated, plan(pulumiv1.PlanApplying, adds), inFlight),
		stackAt("applied", programSHA, gated, plan(pulumiv1.PlanApplied, adds), lastUpdate(pulumiv1.SucceededStackStateMessage, 0)),
		stackAt("rejected", programSHA, gated, plan(pulumiv1.PlanRejected, adds), rejected),
		stackAt("stale", programSHA, gated, plan(pulumiv1.PlanAwaitingApproval, adds), stale),
		stackAt("ungated", programSHA, lastUpdate(pulumiv1.SucceededStackStateMessage, 0)),
	} {
		src[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] = s
	}
	srv := httptest.NewServer(server.New(server.Options{Stacks: src, Guard: tokenGuard{}}))
	t.Cleanup(srv.Close)
	const (
		polling = iota
		succeeds
		fails
		skipped
	)
	for _, tt := range []struct {
		stack, denyOn  string
		plan, approval int
		message        string
	}{
		{"making", "", polling, skipped, ""},
		{"awaiting", "", succeeds, polling, ""},
		{"awaiting", "delete", succeeds, polling, ""},
		{"deleting", "delete", fails, fails, "PlanDenied: the plan of 3f2a9c1 (+1 ~0 -1, plan 3f9a0c1d2e4b) has resources 1 to delete, which denyOn=delete refuses; nothing of it was applied"},
		{"applying", "", succeeds, succeeds, ""},
		{"applied", "", succeeds, succeeds, ""},
		{"rejected", "", fails, fails, "StackStalled: the Stack is stalled (PlanRejected)"},
		{"stale", "", fails, fails, "PlanNotApplied: the approved plan of 3f2a9c1 was not applied"},
		{"ungated", "", succeeds, skipped, ""},
		{"ungated", "delete", fails, fails, "ApprovalNotRequired: denyOn=delete needs a Stack that requires approval"},
	} {
		t.Run(tt.stack+"/denyOn="+tt.denyOn, func(t *testing.T) {
			refVars := map[string]string{}
			if tt.denyOn != "" {
				refVars["denyOn"] = tt.denyOn
			}
			for _, step := range []struct {
				as   string
				want int
			}{{"plan", tt.plan}, {"approval", tt.approval}} {
				if step.want == skipped {
					continue // the plan step's outputs decide; checked below
				}
				cfg := httpStepAs(t, step.as, srv.URL, tt.stack, refVars)
				code, header, body := send(t, cfg)
				success, failure, msg, out := evalStep(t, cfg, code, header, body)
				if success != (step.want == succeeds) || failure != (step.want == fails) {
					t.Fatalf("%s: success %v, failure %v on %d %s", step.as, success, failure, code, body)
				}
				if failure && !strings.HasPrefix(msg, tt.message) {
					t.Errorf("%s: message %q, want %q", step.as, msg, tt.message)
				}
				if step.as == "plan" && success {
					awaiting := tt.stack == "awaiting"
					if out["awaitingApproval"] != awaiting || awaiting && (out["summary"] != "+1 ~0 -1" || out["fingerprint"] != fp) {
						t.Errorf("plan outputs %v on %s", out, body)
					}
				}
			}
		})
	}
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
