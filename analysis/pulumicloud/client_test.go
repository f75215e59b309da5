package pulumicloud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stackflow-io/stackflow/analysis/pulumicloud/cloudtest"
	"github.com/stackflow-io/stackflow/analysis/verification"
)

// Sentinels that must never reach a Result.
const (
	token        = "pul-3f9c0ffee0123456789abcdef0123456789abcd"
	tokenName    = "ci-token-name-sentinel"
	configSecret = "config-value-sentinel"
	envSecret    = "env-value-sentinel"
)

const (
	shaA = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"
	shaB = "b0b1b2b3b4b5b6b7b8b9babbbcbdbebf00112233"
	shaC = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// clock is an injected clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// results collects every Result of the test run, to check none carries a
// secret.
var results struct {
	mu  sync.Mutex
	all []verification.Result
}

func record(r verification.Result) verification.Result {
	results.mu.Lock()
	defer results.mu.Unlock()
	results.all = append(results.all, r)
	return r
}

func verify(t *testing.T, c *Client, org, project, stack string, q verification.Query) verification.Result {
	t.Helper()
	return record(c.Verify(context.Background(), org, project, stack, q))
}

func newClient(srv *cloudtest.Server, clk *clock, mod ...func(*Options)) *Client {
	o := Options{
		BaseURL:    srv.URL,
		ConsoleURL: "https://app.example.com",
		Token:      func(context.Context) (string, error) { return token, nil },
		Now:        clk.Now,
	}
	for _, m := range mod {
		m(&o)
	}
	return New(o)
}

// up builds an update of a kind at a commit; ago is how long before t0 it
// started, took how long it ran (0: still running).
func up(kind, result, commit string, ago, took time.Duration) cloudtest.Update {
	start := t0.Add(-ago).Unix()
	var end int64
	if took > 0 {
		end = t0.Add(-ago + took).Unix()
	}
	return cloudtest.Update{
		Kind: kind, Result: result, StartTime: start, EndTime: end,
		Message: "deploy",
		Environment: map[string]string{
			"git.head":         commit,
			"git.author.email": envSecret,
			"exec.kind":        "cli",
		},
		Config: map[string]cloudtest.ConfigValue{
			"app:password": {String: configSecret, Secret: true},
		},
		ResourceChanges:  map[string]int{"create": 2, "update": 1, "same": 5, "replace": 1, "create-replacement": 1, "delete-replaced": 1},
		ResourceCount:    9,
		RequestedByToken: tokenName,
	}
}

func q(commit string, op verification.Operation) verification.Query {
	return verification.Query{Commit: commit, Operation: op}
}

func TestVerifyPhases(t *testing.T) {
	const (
		U   = cloudtest.KindUpdate
		P   = cloudtest.KindPreview
		PU  = cloudtest.KindPupdate
		S   = cloudtest.ResultSucceeded
		F   = cloudtest.ResultFailed
		IP  = cloudtest.ResultInProgress
		NS  = cloudtest.ResultNotStarted
		opU = verification.OperationUp
		opP = verification.OperationPreview
	)
	type tc struct {
		name    string
		updates []cloudtest.Update
		query   verification.Query
		phase   verification.Phase
		reason  string
		// update is the expected Update.Name ("" for none; "id:N" for the
		// ID of the Nth added update, 1-based).
		update   string
		state    string
		observed string
		message  string // a substring of the message
	}
	cases := []tc{
		{name: "up succeeded", updates: []cloudtest.Update{up(U, S, shaA, time.Hour, time.Minute)},
			query: q(shaA, opU), phase: verification.PhaseSucceeded, reason: verification.ReasonUpdateSucceeded,
			update: "1", state: "succeeded", observed: shaA, message: "succeeded at"},
		{name: "operation defaults to up", updates: []cloudtest.Update{up(U, S, shaA, time.Hour, time.Minute)},
			query: q(shaA, ""), phase: verification.PhaseSucceeded, reason: verification.ReasonUpdateSucceeded,
			update: "1", state: "succeeded", observed: shaA},
		{name: "up in progress", updates: []cloudtest.Update{up(U, IP, shaA, time.Minute, 0)},
			query: q(shaA, opU), phase: verification.PhaseRunning, reason: verification.ReasonUpdateInProgress,
			update: "1", state: "running", observed: shaA, message: "in progress"},
		{name: "up not started", updates: []cloudtest.Update{up(U, NS, shaA, 0, 0)},
			query: q(shaA, opU), phase: verification.PhaseRunning, reason: verification.ReasonUpdateInProgress,
			update: "1", state: "pending", observed: shaA, message: "queued"},
		{name: "up failed", updates: []cloudtest.Update{up(U, F, shaA, time.Hour, time.Minute)},
			query: q(shaA, opU), phase: verification.PhaseFailed, reason: verification.ReasonUpdateFailed,
			update: "1", state: "failed", observed: shaA, message: "failed at"},
		{name: "failed, then a newer success of the commit wins", updates: []cloudtest.Update{
			up(U, F, shaA, 2*time.Hour, time.Minute), up(U, S, shaA, time.Hour, time.Minute)},
			query: q(shaA, opU), phase: verification.PhaseSucceeded, reason: verification.ReasonUpdateSucceeded,
			update: "2", state: "succeeded", observed: shaA},
		{name: "succeeded, then a newer failure of the commit wins", updates: []cloudtest.Update{
			up(U, S, shaA, 2*time.Hour, time.Minute), up(U, F, shaA, time.Hour, time.Minute)},
			query: q(shaA, opU), phase: verification.PhaseFailed, reason: verification.ReasonUpdateFailed,
			update: "2", state: "failed", observed: shaA},
		{name: "failed, then a newer run of the commit in progress", updates: []cloudtest.Update{
			up(U, F, shaA, 2*time.Hour, time.Minute), up(U, IP, shaA, time.Minute, 0)},
			query: q(shaA, opU), phase: verification.PhaseRunning, reason: verification.ReasonUpdateInProgress,
			update: "2", state: "running", observed: shaA},
		{name: "the commit's update, then another commit's: the commit's answers", updates: []cloudtest.Update{
			up(U, S, shaA, 2*time.Hour, time.Minute), up(U, F, shaB, time.Hour, time.Minute)},
			query: q(shaA, opU), phase: verification.PhaseSucceeded, reason: verification.ReasonUpdateSucceeded,
			update: "1", state: "succeeded", observed: shaA},
		{name: "abbreviated commit", updates: []cloudtest.Update{up(U, S, shaA, time.Hour, time.Minute)},
			query: q(shaA[:7], opU), phase: verification.PhaseSucceeded, reason: verification.ReasonUpdateSucceeded,
			update: "1", state: "succeeded", observed: shaA},
		{name: "abbreviated commit of another", updates: []cloudtest.Update{up(U, S, shaA, time.Hour, time.Minute)},
			query: q(shaB[:7], opU), phase: verification.PhasePending, reason: verification.ReasonAwaitingUpdate,
			update: "1", state: "succeeded", observed: shaA},
		{name: "upper-case git.head", updates: []cloudtest.Update{up(U, S, strings.ToUpper(shaA), time.Hour, time.Minute)},
			query: q(shaA, opU), phase: verification.PhaseSucceeded, reason: verification.ReasonUpdateSucceeded,
			update: "1", state: "succeeded", observed: shaA},
		{name: "only other commits: pending, naming the latest", updates: []cloudtest.Update{
			up(U, S, shaC, 2*time.Hour, time.Minute), up(U, S, shaB, time.Hour, time.Minute)},
			query: q(shaA, opU), phase: verification.PhasePending, reason: verification.ReasonAwaitingUpdate,
			update: "2", state: "succeeded", observed: shaB, message: "ran commit " + shaB[:7]},
		{name: "latest update without git.head", updates: []cloudtest.Update{{Kind: U, Result: S, StartTime: t0.Unix() - 60, EndTime: t0.Unix()}},
			query: q(shaA, opU), phase: verification.PhasePending, reason: verification.ReasonAwaitingUpdate,
			update: "1", state: "succeeded", message: "no git.head"},
		{name: "no updates", query: q(shaA, opU), phase: verification.PhasePending, reason: verification.ReasonAwaitingUpdate,
			message: "no update yet"},
		{name: "within: recent enough", updates: []cloudtest.Update{up(U, S, shaA, 2*time.Hour, time.Minute)},
			query: verification.Query{Commit: shaA, Operation: opU, Within: 3 * time.Hour},
			phase: verification.PhaseSucceeded, reason: verification.ReasonUpdateSucceeded, update: "1", state: "succeeded", observed: shaA},
		{name: "within: too old", updates: []cloudtest.Update{up(U, S, shaA, 2*time.Hour, time.Minute)},
			query: verification.Query{Commit: shaA, Operation: opU, Within: time.Hour},
			phase: verification.PhasePending, reason: verification.ReasonSucceededOutsideWindow, update: "1", state: "succeeded", observed: shaA,
			message: "longer ago than within=1h0m0s"},
		{name: "within does not hide a failure", updates: []cloudtest.Update{up(U, F, shaA, 2*time.Hour, time.Minute)},
			query: verification.Query{Commit: shaA, Operation: opU, Within: time.Hour},
			phase: verification.PhaseFailed, reason: verification.ReasonUpdateFailed, update: "1", state: "failed", observed: shaA},
		{name: "up: a preview of the commit is not accepted", updates: []cloudtest.Update{up(P, S, shaA, time.Hour, time.Minute)},
			query: q(shaA, opU), phase: verification.PhasePending, reason: verification.ReasonAwaitingUpdate, message: "no update yet"},
		{name: "up: a refresh of the commit is not accepted", updates: []cloudtest.Update{
			up(U, S, shaB, 2*time.Hour, time.Minute), up(cloudtest.KindRefresh, S, shaA, time.Hour, time.Minute)},
			query: q(shaA, opU), phase: verification.PhasePending, reason: verification.ReasonAwaitingUpdate,
			update: "1", state: "succeeded", observed: shaB},
		{name: "up: a destroy of the commit is not accepted", updates: []cloudtest.Update{up(cloudtest.KindDestroy, S, shaA, time.Hour, time.Minute)},
			query: q(shaA, opU), phase: verification.PhasePending, reason: verification.ReasonAwaitingUpdate},

		{name: "preview succeeded", updates: []cloudtest.Update{up(U, S, shaB, 3*time.Hour, time.Minute), up(P, S, shaA, time.Hour, time.Minute)},
			query: q(shaA, opP), phase: verification.PhaseSucceeded, reason: verification.ReasonUpdateSucceeded,
			update: "id:2", state: "succeeded", observed: shaA},
		{name: "Pupdate preview succeeded", updates: []cloudtest.Update{up(PU, S, shaA, time.Hour, time.Minute)},
			query: q(shaA, opP), phase: verification.PhaseSucceeded, reason: verification.ReasonUpdateSucceeded,
			update: "id:1", state: "succeeded", observed: shaA},
		{name: "preview in progress", updates: []cloudtest.Update{up(P, IP, shaA, time.Minute, 0)},
			query: q(shaA, opP), phase: verification.PhaseRunning, reason: verification.ReasonUpdateInProgress,
			update: "id:1", state: "running", observed: shaA},
		{name: "preview failed", updates: []cloudtest.Update{up(P, F, shaA, time.Hour, time.Minute)},
			query: q(shaA, opP), phase: verification.PhaseFailed, reason: verification.ReasonUpdateFailed,
			update: "id:1", state: "failed", observed: shaA},
		{name: "preview failed, then a newer preview of the commit succeeded", updates: []cloudtest.Update{
			up(P, F, shaA, 2*time.Hour, time.Minute), up(P, S, shaA, time.Hour, time.Minute)},
			query: q(shaA, opP), phase: verification.PhaseSucceeded, reason: verification.ReasonUpdateSucceeded,
			update: "id:2", state: "succeeded", observed: shaA},
		{name: "preview succeeded, then a newer preview of the commit failed", updates: []cloudtest.Update{
			up(P, S, shaA, 2*time.Hour, time.Minute), up(P, F, shaA, time.Hour, time.Minute)},
			query: q(shaA, opP), phase: verification.PhaseFailed, reason: verification.ReasonUpdateFailed,
			update: "id:2", state: "failed", observed: shaA},
		{name: "preview: an up of the commit is not accepted", updates: []cloudtest.Update{up(U, S, shaA, time.Hour, time.Minute)},
			query: q(shaA, opP), phase: verification.PhasePending, reason: verification.ReasonAwaitingUpdate, message: "no preview since its latest update"},
		{name: "preview: a refresh preview of the commit is not accepted", updates: []cloudtest.Update{up(cloudtest.KindPrefresh, S, shaA, time.Hour, time.Minute)},
			query: q(shaA, opP), phase: verification.PhasePending, reason: verification.ReasonAwaitingUpdate},
		{name: "preview: another commit's preview, pending naming it", updates: []cloudtest.Update{up(P, S, shaB, time.Hour, time.Minute)},
			query: q(shaA, opP), phase: verification.PhasePending, reason: verification.ReasonAwaitingUpdate,
			update: "id:1", state: "succeeded", observed: shaB, message: "ran commit " + shaB[:7]},
		{name: "preview within: too old", updates: []cloudtest.Update{up(P, S, shaA, 2*time.Hour, time.Minute)},
			query: verification.Query{Commit: shaA, Operation: opP, Within: time.Hour},
			phase: verification.PhasePending, reason: verification.ReasonSucceededOutsideWindow, update: "id:1", state: "succeeded", observed: shaA},
		{name: "preview before the latest update is no longer listed", updates: []cloudtest.Update{
			up(P, S, shaA, 3*time.Hour, time.Minute), up(U, S, shaB, time.Hour, time.Minute)},
			query: q(shaA, opP), phase: verification.PhasePending, reason: verification.ReasonAwaitingUpdate},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := cloudtest.NewTB(t, token)
			srv.AddStack("acme", "web", "prod")
			var added []cloudtest.Update
			for _, u := range c.updates {
				added = append(added, srv.AddUpdate("acme", "web", "prod", u))
			}
			clk := &clock{t: t0}
			cl := newClient(srv, clk)
			r := verify(t, cl, "acme", "web", "prod", c.query)
			if r.Phase != c.phase || r.Reason != c.reason {
				t.Fatalf("got %s/%s (%s), want %s/%s", r.Phase, r.Reason, r.Message, c.phase, c.reason)
			}
			if c.message != "" && !strings.Contains(r.Message, c.message) {
				t.Errorf("message %q does not contain %q", r.Message, c.message)
			}
			if r.Message == "" {
				t.Error("empty message")
			}
			wantOp := c.query.Operation
			if wantOp == "" {
				wantOp = verification.OperationUp
			}
			if r.Operation != wantOp {
				t.Errorf("operation %q, want %q", r.Operation, wantOp)
			}
			if r.Stack.Organization != "acme" || r.Stack.Project != "web" || r.Stack.Name != "prod" {
				t.Errorf("stack %+v", r.Stack)
			}
			if r.RequestedCommit == nil || r.RequestedCommit.SHA != c.query.Commit {
				t.Errorf("requested commit %+v", r.RequestedCommit)
			}
			if !r.ObservedAt.Equal(t0) {
				t.Errorf("observedAt %s", r.ObservedAt)
			}
			switch {
			case c.observed == "" && r.ObservedCommit != nil:
				t.Errorf("observed commit %+v, want none", r.ObservedCommit)
			case c.observed != "" && (r.ObservedCommit == nil || r.ObservedCommit.SHA != c.observed || r.ObservedCommit.Short != c.observed[:7]):
				t.Errorf("observed commit %+v, want %s", r.ObservedCommit, c.observed)
			}
			want := c.update
			if id, ok := strings.CutPrefix(want, "id:"); ok {
				var n int
				fmt.Sscan(id, &n)
				want = added[n-1].UpdateID
			}
			if want == "" {
				if r.Update != nil {
					t.Errorf("update %+v, want none", r.Update)
				}
				return
			}
			if r.Update == nil {
				t.Fatalf("no update, want %s", want)
			}
			if r.Update.Name != want || r.Update.State != c.state {
				t.Errorf("update %s/%s, want %s/%s", r.Update.Name, r.Update.State, want, c.state)
			}
		})
	}
}

// TestVerifyResultFields checks every field of a succeeded up and preview.
func TestVerifyResultFields(t *testing.T) {
	srv := cloudtest.NewTB(t, token)
	u := srv.AddUpdate("acme", "web", "prod", up(cloudtest.KindUpdate, cloudtest.ResultSucceeded, shaA, time.Hour, 2*time.Minute))
	p := srv.AddUpdate("acme", "web", "prod", up(cloudtest.KindPreview, cloudtest.ResultSucceeded, shaB, 30*time.Minute, time.Minute))
	clk := &clock{t: t0}
	cl := newClient(srv, clk)

	r := verify(t, cl, "acme", "web", "prod", q(shaA[:10], verification.OperationUp))
	start, end := t0.Add(-time.Hour), t0.Add(-time.Hour+2*time.Minute)
	want := verification.Result{
		Phase:           verification.PhaseSucceeded,
		Reason:          verification.ReasonUpdateSucceeded,
		Message:         "update 1 of acme/web/prod at commit a1b2c3d succeeded at " + end.Format(time.RFC3339),
		Operation:       verification.OperationUp,
		RequestedCommit: &verification.Commit{SHA: shaA[:10], Short: shaA[:7]},
		ObservedCommit:  &verification.Commit{SHA: shaA, Short: shaA[:7]},
		Stack: verification.StackRef{Organization: "acme", Project: "web", Name: "prod",
			LastSuccessfulCommit: &verification.Commit{SHA: shaA, Short: shaA[:7]},
			LastAttemptedCommit:  &verification.Commit{SHA: shaA, Short: shaA[:7]}},
		Update: &verification.Update{Name: "1", Type: "up", State: "succeeded", StartTime: &start, EndTime: &end,
			Permalink: "https://app.example.com/acme/web/prod/updates/1",
			Changes:   &verification.Changes{Create: 2, Update: 1, Replace: 1, Same: 5}},
		ObservedAt: t0,
	}
	if g, w := mustJSON(t, r), mustJSON(t, want); g != w {
		t.Errorf("up result\n got %s\nwant %s", g, w)
	}
	if u.Version != 1 {
		t.Fatalf("version %d", u.Version)
	}

	r = verify(t, cl, "acme", "web", "prod", q(shaB, verification.OperationPreview))
	pstart, pend := t0.Add(-30*time.Minute), t0.Add(-29*time.Minute)
	want = verification.Result{
		Phase:           verification.PhaseSucceeded,
		Reason:          verification.ReasonUpdateSucceeded,
		Message:         "preview " + p.UpdateID + " of acme/web/prod at commit b0b1b2b succeeded at " + pend.Format(time.RFC3339),
		Operation:       verification.OperationPreview,
		RequestedCommit: &verification.Commit{SHA: shaB, Short: shaB[:7]},
		ObservedCommit:  &verification.Commit{SHA: shaB, Short: shaB[:7]},
		Stack:           verification.StackRef{Organization: "acme", Project: "web", Name: "prod"},
		Update: &verification.Update{Name: p.UpdateID, Type: "preview", State: "succeeded", StartTime: &pstart, EndTime: &pend,
			Changes: &verification.Changes{Create: 2, Update: 1, Replace: 1, Same: 5}},
		ObservedAt: t0,
	}
	if g, w := mustJSON(t, r), mustJSON(t, want); g != w {
		t.Errorf("preview result\n got %s\nwant %s", g, w)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRequests checks the routes, query and headers sent.
func TestRequests(t *testing.T) {
	srv := cloudtest.NewTB(t, token)
	srv.AddStack("acme", "web", "prod")
	cl := newClient(srv, &clock{t: t0})
	verify(t, cl, "acme", "web", "prod", q(shaA, verification.OperationUp))
	h := srv.LastHeader()
	for k, v := range map[string]string{
		"Authorization": "token " + token,
		"Accept":        "application/vnd.pulumi+8",
		"Content-Type":  "application/json",
	} {
		if got := h.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	verify(t, cl, "acme", "web", "prod", q(shaA, verification.OperationPreview))
	want := []string{
		"/api/stacks/acme/web/prod/updates?output-type=service&page=1&pageSize=25",
		"/api/stacks/acme/web/prod/updates/latest/previews?asc=false&page=1&pageSize=25",
	}
	if got := srv.RequestLog(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestPageSize checks only the latest PageSize updates are read.
func TestPageSize(t *testing.T) {
	srv := cloudtest.NewTB(t, token)
	srv.AddUpdate("acme", "web", "prod", up(cloudtest.KindUpdate, cloudtest.ResultSucceeded, shaA, 3*time.Hour, time.Minute))
	srv.AddUpdate("acme", "web", "prod", up(cloudtest.KindUpdate, cloudtest.ResultSucceeded, shaB, 2*time.Hour, time.Minute))
	srv.AddUpdate("acme", "web", "prod", up(cloudtest.KindUpdate, cloudtest.ResultSucceeded, shaC, time.Hour, time.Minute))
	cl := newClient(srv, &clock{t: t0}, func(o *Options) { o.PageSize = 2 })
	r := verify(t, cl, "acme", "web", "prod", q(shaA, verification.OperationUp))
	if r.Reason != verification.ReasonAwaitingUpdate || !strings.Contains(r.Message, "last 2 updates") {
		t.Errorf("%s: %s", r.Reason, r.Message)
	}
	r = verify(t, cl, "acme", "web", "prod", q(shaB, verification.OperationUp))
	if r.Phase != verification.PhaseSucceeded || r.Update.Name != "2" {
		t.Errorf("%s: %s", r.Reason, r.Message)
	}
}

// TestAPITrouble checks that API trouble is always Pending, with a reason
// and a message, and never Failed.
func TestAPITrouble(t *testing.T) {
	cases := []struct {
		name    string
		fault   *cloudtest.Fault
		token   string // the client's token ("" for the right one)
		stack   string
		reason  string
		message []string
	}{
		{name: "unknown stack", stack: "nope", reason: verification.ReasonStackNotFound, message: []string{"acme/web/nope", "404"}},
		{name: "wrong token", token: "pul-wrong", reason: verification.ReasonCloudUnauthorized, message: []string{"401", "token"}},
		{name: "403", fault: &cloudtest.Fault{Status: 403}, reason: verification.ReasonCloudUnauthorized, message: []string{"403", "token"}},
		{name: "429 with Retry-After", fault: &cloudtest.Fault{Status: 429, RetryAfter: "30"}, reason: verification.ReasonCloudUnavailable,
			message: []string{"429", "rate limiting", "30s"}},
		{name: "429 without Retry-After", fault: &cloudtest.Fault{Status: 429}, reason: verification.ReasonCloudUnavailable, message: []string{"429"}},
		{name: "500", fault: &cloudtest.Fault{Status: 500}, reason: verification.ReasonCloudUnavailable, message: []string{"500 Internal Server Error"}},
		{name: "502", fault: &cloudtest.Fault{Status: 502}, reason: verification.ReasonCloudUnavailable, message: []string{"502"}},
		{name: "503", fault: &cloudtest.Fault{Status: 503}, reason: verification.ReasonCloudUnavailable, message: []string{"503"}},
		{name: "unexpected 4xx", fault: &cloudtest.Fault{Status: 409}, reason: verification.ReasonCloudUnavailable, message: []string{"409"}},
		{name: "connection dropped", fault: &cloudtest.Fault{Drop: true, Count: 2}, reason: verification.ReasonCloudUnavailable, message: []string{"could not be reached"}},
	}
	for _, c := range cases {
		for _, op := range []verification.Operation{verification.OperationUp, verification.OperationPreview} {
			t.Run(c.name+"/"+string(op), func(t *testing.T) {
				srv := cloudtest.NewTB(t, token)
				// A failed update of the commit: trouble must not turn it
				// into an answer, let alone Failed.
				srv.AddUpdate("acme", "web", "prod", up(cloudtest.KindUpdate, cloudtest.ResultFailed, shaA, time.Hour, time.Minute))
				srv.AddUpdate("acme", "web", "prod", up(cloudtest.KindPreview, cloudtest.ResultFailed, shaA, time.Hour, time.Minute))
				if c.fault != nil {
					srv.Inject(*c.fault)
				}
				tok := token
				if c.token != "" {
					tok = c.token
				}
				cl := newClient(srv, &clock{t: t0}, func(o *Options) {
					o.Token = func(context.Context) (string, error) { return tok, nil }
				})
				stack := "prod"
				if c.stack != "" {
					stack = c.stack
				}
				r := verify(t, cl, "acme", "web", stack, q(shaA, op))
				if r.Phase != verification.PhasePending || r.Reason != c.reason {
					t.Fatalf("got %s/%s (%s), want Pending/%s", r.Phase, r.Reason, r.Message, c.reason)
				}
				for _, m := range c.message {
					if !strings.Contains(r.Message, m) {
						t.Errorf("message %q does not contain %q", r.Message, m)
					}
				}
				if r.Update != nil || r.ObservedCommit != nil {
					t.Errorf("update %+v, observed %+v: want none", r.Update, r.ObservedCommit)
				}
				if r.Stack.Name != stack || r.RequestedCommit == nil || r.Operation != op {
					t.Errorf("result not filled: %+v", r)
				}
				if strings.Contains(r.Message, tok) {
					t.Errorf("message carries the token: %s", r.Message)
				}
			})
		}
	}
}

func TestUnreachable(t *testing.T) {
	srv := cloudtest.New(token)
	url := srv.URL
	srv.Close()
	cl := New(Options{BaseURL: url, Token: func(context.Context) (string, error) { return token, nil }, Now: (&clock{t: t0}).Now})
	r := verify(t, cl, "acme", "web", "prod", q(shaA, verification.OperationUp))
	if r.Phase != verification.PhasePending || r.Reason != verification.ReasonCloudUnavailable || !strings.Contains(r.Message, "could not be reached") {
		t.Errorf("%s/%s: %s", r.Phase, r.Reason, r.Message)
	}
}

// TestSilentAPITimesOut: an API that accepts the connection and never
// answers is reported Pending/CloudUnavailable once Timeout has passed.
func TestSilentAPITimesOut(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	cl := New(Options{BaseURL: "http://" + l.Addr().String(), Token: func(context.Context) (string, error) { return token, nil },
		Now: (&clock{t: t0}).Now, Timeout: 500 * time.Millisecond})
	start := time.Now()
	r := verify(t, cl, "acme", "web", "prod", q(shaA, verification.OperationUp))
	t.Logf("%s/%s after %s: %s", r.Phase, r.Reason, time.Since(start).Round(time.Millisecond), r.Message)
	if r.Phase != verification.PhasePending || r.Reason != verification.ReasonCloudUnavailable {
		t.Errorf("%s/%s: %s", r.Phase, r.Reason, r.Message)
	}
}

func TestUndecodable(t *testing.T) {
	for name, body := range map[string]string{
		"not JSON":   `<html>maintenance</html>`,
		"wrong type": `{"updates": {"kind": "update"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write([]byte(body))
			}))
			defer hs.Close()
			cl := New(Options{BaseURL: hs.URL, Token: func(context.Context) (string, error) { return token, nil }})
			r := verify(t, cl, "acme", "web", "prod", q(shaA, verification.OperationUp))
			if r.Phase != verification.PhasePending || r.Reason != verification.ReasonCloudUnavailable || !strings.Contains(r.Message, "documented JSON") {
				t.Errorf("%s/%s: %s", r.Phase, r.Reason, r.Message)
			}
		})
	}
}

func TestUnknownResult(t *testing.T) {
	srv := cloudtest.NewTB(t, token)
	srv.AddUpdate("acme", "web", "prod", cloudtest.Update{Kind: cloudtest.KindUpdate, Result: "exploded",
		StartTime: t0.Unix() - 60, Environment: map[string]string{"git.head": shaA}})
	r := verify(t, newClient(srv, &clock{t: t0}), "acme", "web", "prod", q(shaA, verification.OperationUp))
	if r.Phase != verification.PhasePending || r.Reason != verification.ReasonCloudUnavailable || !strings.Contains(r.Message, `"exploded"`) {
		t.Errorf("%s/%s: %s", r.Phase, r.Reason, r.Message)
	}
}

func TestTokenTrouble(t *testing.T) {
	srv := cloudtest.NewTB(t, token)
	srv.AddStack("acme", "web", "prod")
	for name, tok := range map[string]func(context.Context) (string, error){
		"error": func(context.Context) (string, error) { return "", errors.New(`secret "pulumi-token" not found`) },
		"empty": func(context.Context) (string, error) { return "", nil },
		"nil":   nil,
	} {
		t.Run(name, func(t *testing.T) {
			cl := newClient(srv, &clock{t: t0}, func(o *Options) { o.Token = tok })
			before := srv.Requests()
			r := verify(t, cl, "acme", "web", "prod", q(shaA, verification.OperationUp))
			if r.Phase != verification.PhasePending || r.Reason != verification.ReasonCloudUnauthorized || !strings.Contains(r.Message, "token") {
				t.Errorf("%s/%s: %s", r.Phase, r.Reason, r.Message)
			}
			if srv.Requests() != before {
				t.Error("a request was sent without a token")
			}
		})
	}
}

func TestRotatedToken(t *testing.T) {
	srv := cloudtest.NewTB(t, "pul-old")
	srv.AddUpdate("acme", "web", "prod", up(cloudtest.KindUpdate, cloudtest.ResultSucceeded, shaA, time.Hour, time.Minute))
	clk := &clock{t: t0}
	var mu sync.Mutex
	current := "pul-old"
	cl := newClient(srv, clk, func(o *Options) {
		o.Token = func(context.Context) (string, error) { mu.Lock(); defer mu.Unlock(); return current, nil }
	})
	if r := verify(t, cl, "acme", "web", "prod", q(shaA, "")); r.Phase != verification.PhaseSucceeded {
		t.Fatalf("%s/%s: %s", r.Phase, r.Reason, r.Message)
	}
	srv.SetToken("pul-new")
	clk.Advance(DefaultCacheTTL)
	if r := verify(t, cl, "acme", "web", "prod", q(shaA, "")); r.Reason != verification.ReasonCloudUnauthorized {
		t.Fatalf("%s/%s: %s", r.Phase, r.Reason, r.Message)
	}
	mu.Lock()
	current = "pul-new"
	mu.Unlock()
	clk.Advance(DefaultCacheTTL)
	if r := verify(t, cl, "acme", "web", "prod", q(shaA, "")); r.Phase != verification.PhaseSucceeded {
		t.Fatalf("%s/%s: %s", r.Phase, r.Reason, r.Message)
	}
}

// TestNotFoundAfter: an unknown stack is Pending until the caller's
// notFoundAfter, then Failed naming it; other trouble stays Pending past it.
func TestNotFoundAfter(t *testing.T) {
	srv := cloudtest.NewTB(t, token)
	srv.AddUpdate("acme", "web", "prod", up(cloudtest.KindUpdate, cloudtest.ResultSucceeded, shaA, time.Hour, time.Minute))
	clk := &clock{t: t0}
	cl := newClient(srv, clk)
	qa := q(shaA, verification.OperationUp)
	qa.NotFoundAfter = t0.Add(time.Minute)
	if r := verify(t, cl, "acme", "web", "nope", qa); r.Phase != verification.PhasePending || r.Reason != verification.ReasonStackNotFound {
		t.Fatalf("before notFoundAfter: %s/%s: %s", r.Phase, r.Reason, r.Message)
	}
	clk.Advance(time.Minute)
	r := verify(t, cl, "acme", "web", "nope", qa)
	if r.Phase != verification.PhaseFailed || r.Reason != verification.ReasonStackNotFound ||
		!strings.Contains(r.Message, "acme/web/nope") || !strings.Contains(r.Message, "until 2026-12-01T12:01:00Z (notFoundAfter)") {
		t.Fatalf("at notFoundAfter: %s/%s: %s", r.Phase, r.Reason, r.Message)
	}
	if r := verify(t, cl, "acme", "web", "prod", qa); r.Phase != verification.PhaseSucceeded {
		t.Fatalf("a stack that exists, past notFoundAfter: %s/%s: %s", r.Phase, r.Reason, r.Message)
	}
	clk.Advance(DefaultCacheTTL)
	srv.Inject(cloudtest.Fault{Status: 503})
	if r := verify(t, cl, "acme", "web", "prod", qa); r.Phase != verification.PhasePending || r.Reason != verification.ReasonCloudUnavailable {
		t.Fatalf("an outage past notFoundAfter: %s/%s: %s", r.Phase, r.Reason, r.Message)
	}
}

func TestInvalidNames(t *testing.T) {
	srv := cloudtest.NewTB(t, token)
	cl := newClient(srv, &clock{t: t0})
	for _, n := range [][3]string{{"acme", "web", "a/b"}, {"..", "web", "prod"}, {"acme", "", "prod"}, {"acme", "web?x=1", "prod"}} {
		r := verify(t, cl, n[0], n[1], n[2], q(shaA, verification.OperationUp))
		if r.Phase != verification.PhasePending || r.Reason != verification.ReasonStackNotFound {
			t.Errorf("%v: %s/%s", n, r.Phase, r.Reason)
		}
	}
	if srv.Requests() != 0 {
		t.Errorf("%d requests for invalid names", srv.Requests())
	}
}

func TestValidName(t *testing.T) {
	for s, want := range map[string]bool{
		"acme": true, "my-org_2.x": true, "A": true, strings.Repeat("a", 100): true,
		"": false, ".": false, "..": false, "a/b": false, "a b": false, "a%2F": false, "é": false,
		strings.Repeat("a", 101): false, "a\n": false, "a?": false, "a#": false,
	} {
		if got := ValidName(s); got != want {
			t.Errorf("ValidName(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestCache(t *testing.T) {
	srv := cloudtest.NewTB(t, token)
	u := srv.AddUpdate("acme", "web", "prod", up(cloudtest.KindUpdate, cloudtest.ResultInProgress, shaA, time.Minute, 0))
	clk := &clock{t: t0}
	cl := newClient(srv, clk)
	get := func() verification.Result {
		return verify(t, cl, "acme", "web", "prod", q(shaA, verification.OperationUp))
	}

	if r := get(); r.Phase != verification.PhaseRunning || srv.Requests() != 1 {
		t.Fatalf("%s, %d requests", r.Phase, srv.Requests())
	}
	srv.SetResult("acme", "web", "prod", u.UpdateID, cloudtest.ResultSucceeded, t0.Unix())
	clk.Advance(DefaultCacheTTL - time.Millisecond)
	if r := get(); r.Phase != verification.PhaseRunning || srv.Requests() != 1 {
		t.Fatalf("within the TTL: %s, %d requests; want the cached Running and no request", r.Phase, srv.Requests())
	}
	if r := get(); !r.ObservedAt.Equal(clk.Now()) {
		t.Errorf("a cached answer is observed at %s, want now", r.ObservedAt)
	}
	clk.Advance(time.Millisecond)
	if r := get(); r.Phase != verification.PhaseSucceeded || srv.Requests() != 2 {
		t.Fatalf("after the TTL: %s, %d requests; want a refetch", r.Phase, srv.Requests())
	}
	// The preview route is cached apart.
	verify(t, cl, "acme", "web", "prod", q(shaA, verification.OperationPreview))
	verify(t, cl, "acme", "web", "prod", q(shaA, verification.OperationPreview))
	if srv.Requests() != 3 {
		t.Errorf("%d requests, want 3", srv.Requests())
	}
	// Other commits of the same stack use the cached list.
	verify(t, cl, "acme", "web", "prod", q(shaB, verification.OperationUp))
	if srv.Requests() != 3 {
		t.Errorf("%d requests, want 3", srv.Requests())
	}
}

func TestCacheErrors(t *testing.T) {
	srv := cloudtest.NewTB(t, token)
	srv.AddUpdate("acme", "web", "prod", up(cloudtest.KindUpdate, cloudtest.ResultSucceeded, shaA, time.Hour, time.Minute))
	clk := &clock{t: t0}
	cl := newClient(srv, clk)
	get := func() verification.Result {
		return verify(t, cl, "acme", "web", "prod", q(shaA, verification.OperationUp))
	}

	// A 500 is cached for the TTL only.
	srv.Inject(cloudtest.Fault{Status: 500})
	if r := get(); r.Reason != verification.ReasonCloudUnavailable {
		t.Fatal(r.Reason)
	}
	if r := get(); r.Reason != verification.ReasonCloudUnavailable || srv.Requests() != 1 {
		t.Fatalf("%s, %d requests", r.Reason, srv.Requests())
	}
	clk.Advance(DefaultCacheTTL)
	if r := get(); r.Phase != verification.PhaseSucceeded || srv.Requests() != 2 {
		t.Fatalf("%s, %d requests", r.Reason, srv.Requests())
	}

	// A 429 is cached for as long as its Retry-After asks.
	clk.Advance(DefaultCacheTTL)
	srv.Inject(cloudtest.Fault{Status: 429, RetryAfter: "60"})
	if r := get(); r.Reason != verification.ReasonCloudUnavailable || srv.Requests() != 3 {
		t.Fatalf("%s, %d requests", r.Reason, srv.Requests())
	}
	clk.Advance(59 * time.Second)
	if r := get(); r.Reason != verification.ReasonCloudUnavailable || srv.Requests() != 3 {
		t.Fatalf("before Retry-After: %s, %d requests", r.Reason, srv.Requests())
	}
	clk.Advance(time.Second)
	if r := get(); r.Phase != verification.PhaseSucceeded || srv.Requests() != 4 {
		t.Fatalf("after Retry-After: %s, %d requests", r.Reason, srv.Requests())
	}
}

func TestCacheDisabled(t *testing.T) {
	srv := cloudtest.NewTB(t, token)
	srv.AddStack("acme", "web", "prod")
	cl := newClient(srv, &clock{t: t0}, func(o *Options) { o.CacheTTL = -1 })
	verify(t, cl, "acme", "web", "prod", q(shaA, ""))
	verify(t, cl, "acme", "web", "prod", q(shaA, ""))
	if srv.Requests() != 2 || cl.CacheLen() != 0 {
		t.Errorf("%d requests, %d cached", srv.Requests(), cl.CacheLen())
	}
}

func TestCacheBounded(t *testing.T) {
	srv := cloudtest.NewTB(t, token)
	for _, s := range []string{"a", "b", "c"} {
		srv.AddStack("acme", "web", s)
	}
	cl := newClient(srv, &clock{t: t0}, func(o *Options) { o.CacheSize = 2 })
	for _, s := range []string{"a", "b", "c"} {
		verify(t, cl, "acme", "web", s, q(shaA, ""))
	}
	if cl.CacheLen() != 2 || srv.Requests() != 3 {
		t.Fatalf("%d cached, %d requests", cl.CacheLen(), srv.Requests())
	}
	verify(t, cl, "acme", "web", "c", q(shaA, ""))
	verify(t, cl, "acme", "web", "b", q(shaA, ""))
	if srv.Requests() != 3 {
		t.Errorf("b and c should be cached: %d requests", srv.Requests())
	}
	verify(t, cl, "acme", "web", "a", q(shaA, "")) // evicted, the oldest
	if srv.Requests() != 4 || cl.CacheLen() != 2 {
		t.Errorf("a should have been evicted: %d requests, %d cached", srv.Requests(), cl.CacheLen())
	}
}

// gate is a transport that holds requests until released.
type gate struct {
	next    http.RoundTripper
	arrived chan struct{}
	release chan struct{}
}

func (g *gate) RoundTrip(r *http.Request) (*http.Response, error) {
	g.arrived <- struct{}{}
	<-g.release
	return g.next.RoundTrip(r)
}

func (c *Client) joined(k cacheKey) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.inflight[k]; cl != nil {
		return cl.joined
	}
	return -1
}

func TestOneRequestInFlight(t *testing.T) {
	srv := cloudtest.NewTB(t, token)
	srv.AddUpdate("acme", "web", "prod", up(cloudtest.KindUpdate, cloudtest.ResultSucceeded, shaA, time.Hour, time.Minute))
	g := &gate{next: http.DefaultTransport, arrived: make(chan struct{}, 100), release: make(chan struct{})}
	cl := newClient(srv, &clock{t: t0}, func(o *Options) {
		o.HTTPClient = &http.Client{Transport: g}
		o.CacheTTL = -1 // no cache: only the in-flight sharing
	})
	const n = 20
	var wg sync.WaitGroup
	out := make(chan verification.Result, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out <- record(cl.Verify(context.Background(), "acme", "web", "prod", q(shaA, "")))
		}()
	}
	<-g.arrived
	k := cacheKey{org: "acme", project: "web", stack: "prod"}
	deadline := time.Now().Add(10 * time.Second)
	for cl.joined(k) < n-1 {
		if time.Now().After(deadline) {
			close(g.release)
			t.Fatalf("only %d callers joined the request in flight, want %d", cl.joined(k), n-1)
		}
		runtime.Gosched()
	}
	close(g.release)
	wg.Wait()
	close(out)
	for r := range out {
		if r.Phase != verification.PhaseSucceeded {
			t.Errorf("%s/%s: %s", r.Phase, r.Reason, r.Message)
		}
	}
	if srv.Requests() != 1 {
		t.Errorf("%d requests, want 1", srv.Requests())
	}
}

func TestCancelledWhileWaiting(t *testing.T) {
	srv := cloudtest.NewTB(t, token)
	srv.AddStack("acme", "web", "prod")
	g := &gate{next: http.DefaultTransport, arrived: make(chan struct{}, 10), release: make(chan struct{})}
	cl := newClient(srv, &clock{t: t0}, func(o *Options) { o.HTTPClient = &http.Client{Transport: g} })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan verification.Result)
	go func() { done <- record(cl.Verify(ctx, "acme", "web", "prod", q(shaA, ""))) }()
	<-g.arrived
	cancel()
	r := <-done
	if r.Phase != verification.PhasePending || r.Reason != verification.ReasonCloudUnavailable {
		t.Errorf("%s/%s: %s", r.Phase, r.Reason, r.Message)
	}
	close(g.release)
	// The request still completes and fills the cache for the next caller.
	for cl.CacheLen() == 0 {
		runtime.Gosched()
	}
	if r := verify(t, cl, "acme", "web", "prod", q(shaA, "")); r.Reason != verification.ReasonAwaitingUpdate || srv.Requests() != 1 {
		t.Errorf("%s, %d requests", r.Reason, srv.Requests())
	}
}

func TestDefaults(t *testing.T) {
	c := New(Options{})
	if c.base != DefaultBaseURL || c.console != DefaultConsoleURL || c.ttl != DefaultCacheTTL ||
		c.size != DefaultCacheSize || c.pageSize != DefaultPageSize || c.hc == nil || c.hc.Timeout == 0 || c.now == nil {
		t.Errorf("defaults: %+v", c)
	}
	c = New(Options{BaseURL: "https://pulumi-api.example.com/", PageSize: 1000})
	if c.base != "https://pulumi-api.example.com" || c.console != "" || c.pageSize != MaxPageSize {
		t.Errorf("self-hosted: base %q console %q page %d", c.base, c.console, c.pageSize)
	}
	// Without a console URL there is no permalink.
	srv := cloudtest.NewTB(t, token)
	srv.AddUpdate("acme", "web", "prod", up(cloudtest.KindUpdate, cloudtest.ResultSucceeded, shaA, time.Hour, time.Minute))
	cl := newClient(srv, &clock{t: t0}, func(o *Options) { o.ConsoleURL = "" })
	if r := verify(t, cl, "acme", "web", "prod", q(shaA, "")); r.Update == nil || r.Update.Permalink != "" {
		t.Errorf("update %+v", r.Update)
	}
}

func TestRetryAfter(t *testing.T) {
	for h, want := range map[string]time.Duration{
		"":       0,
		"30":     30 * time.Second,
		" 5 ":    5 * time.Second,
		"0":      0,
		"-3":     0,
		"100000": maxRetryAfter,
		"soon":   0,
		t0.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		t0.Add(-time.Hour).Format(http.TimeFormat):       0,
	} {
		if got := retryAfter(h, t0); got != want {
			t.Errorf("retryAfter(%q) = %s, want %s", h, got, want)
		}
	}
}

// TestMain runs the tests, then checks that no Result of any test carries
// the token, its name, a config value or an environment value other than
// git.head.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		results.mu.Lock()
		b, err := json.Marshal(results.all)
		results.mu.Unlock()
		if err != nil {
			panic(err)
		}
		if s := secretIn(string(b)); s != "" {
			fmt.Printf("a Result of the tests carries %q\n", s)
			code = 1
		}
	}
	os.Exit(code)
}

func secretIn(s string) string {
	for _, x := range []string{token, tokenName, configSecret, envSecret, "pul-old", "pul-new", "pul-wrong", "app:password", "git.author", "ci-bot"} {
		if strings.Contains(s, x) {
			return x
		}
	}
	return ""
}

// TestNoSecrets checks, on its own, the answers most likely to carry a
// secret: a success (the API's answer holds config, environment and the
// token name), a preview, a wrong token and a token-read error.
func TestNoSecrets(t *testing.T) {
	srv := cloudtest.NewTB(t, token)
	srv.AddUpdate("acme", "web", "prod", up(cloudtest.KindUpdate, cloudtest.ResultSucceeded, shaA, time.Hour, time.Minute))
	srv.AddUpdate("acme", "web", "prod", up(cloudtest.KindPreview, cloudtest.ResultFailed, shaA, time.Minute, time.Second))
	var rs []verification.Result
	cl := newClient(srv, &clock{t: t0})
	rs = append(rs, verify(t, cl, "acme", "web", "prod", q(shaA, verification.OperationUp)),
		verify(t, cl, "acme", "web", "prod", q(shaA, verification.OperationPreview)),
		verify(t, cl, "acme", "web", "prod", q(shaB, verification.OperationUp)))
	bad := newClient(srv, &clock{t: t0}, func(o *Options) {
		o.Token = func(context.Context) (string, error) { return "pul-wrong", nil }
	})
	rs = append(rs, verify(t, bad, "acme", "web", "prod", q(shaA, verification.OperationUp)))
	if rs[0].Phase != verification.PhaseSucceeded || rs[1].Phase != verification.PhaseFailed || rs[3].Reason != verification.ReasonCloudUnauthorized {
		t.Fatalf("unexpected answers: %+v", rs)
	}
	b := mustJSON(t, rs)
	if s := secretIn(b); s != "" {
		t.Errorf("a Result carries %q: %s", s, b)
	}
}

// TestKindFilterOnMixedLists serves lists that mix kinds (the documented
// routes do not: the update list holds no previews and the preview list no
// updates), so the client's own filter is what keeps an up from answering
// a preview and the reverse. The JSON is the documented List Previews
// example's shape.
func TestKindFilterOnMixedLists(t *testing.T) {
	item := func(kind, result, head string, version int, id string) string {
		return fmt.Sprintf(`{"info": {"kind": %q, "startTime": %d, "message": "m", "environment": {"exec.kind": "cli", "git.head": %q, "git.author.email": %q},
			"config": {"aws:region": {"string": %q, "secret": false, "object": false}}, "result": %q, "endTime": %d, "version": %d,
			"resourceChanges": {"create": 0, "delete": 0, "same": 0, "update": 0}},
			"updateID": %q, "version": %d, "latestVersion": 3, "requestedByToken": %q}`,
			kind, t0.Unix()-600, head, envSecret, configSecret, result, t0.Unix()-500, version, id, version, tokenName)
	}
	updates := `{"updates": [` + strings.Join([]string{
		item("preview", "succeeded", shaA, 3, "id-p"),
		item("refresh", "succeeded", shaA, 3, "id-r"),
		item("update", "failed", shaB, 2, "id-u2"),
	}, ",") + `], "itemsPerPage": 25, "total": 3}`
	previews := `{"updates": [` + strings.Join([]string{
		item("update", "succeeded", shaB, 3, "id-u3"),
		item("Pupdate", "failed", shaA, 3, "id-pa"),
	}, ",") + `], "itemsPerPage": 25, "total": 2}`
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/previews") {
			_, _ = w.Write([]byte(previews))
			return
		}
		_, _ = w.Write([]byte(updates))
	}))
	defer hs.Close()
	cl := New(Options{BaseURL: hs.URL, Token: func(context.Context) (string, error) { return token, nil }, Now: (&clock{t: t0}).Now})

	r := verify(t, cl, "acme", "web", "prod", q(shaA, verification.OperationUp))
	if r.Reason != verification.ReasonAwaitingUpdate || r.Update == nil || r.Update.Name != "2" || r.ObservedCommit.SHA != shaB {
		t.Errorf("up of A: %s: %s", r.Reason, r.Message)
	}
	if r.Stack.LastAttemptedCommit == nil || r.Stack.LastAttemptedCommit.SHA != shaA {
		t.Errorf("last attempted %+v, want the refresh's commit", r.Stack.LastAttemptedCommit)
	}
	r = verify(t, cl, "acme", "web", "prod", q(shaB, verification.OperationUp))
	if r.Phase != verification.PhaseFailed {
		t.Errorf("up of B: %s/%s: %s", r.Phase, r.Reason, r.Message)
	}
	r = verify(t, cl, "acme", "web", "prod", q(shaB, verification.OperationPreview))
	if r.Reason != verification.ReasonAwaitingUpdate || r.Update == nil || r.Update.Name != "id-pa" {
		t.Errorf("preview of B: %s: %s", r.Reason, r.Message)
	}
	r = verify(t, cl, "acme", "web", "prod", q(shaA, verification.OperationPreview))
	if r.Phase != verification.PhaseFailed || r.Update.Type != "preview" {
		t.Errorf("preview of A: %s/%s: %s", r.Phase, r.Reason, r.Message)
	}
}
