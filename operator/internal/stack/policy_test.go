package stack

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

const (
	revA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	revB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// stackWith builds a branch-tracking Stack at generation 3 with the options
// applied.
func stackWith(opts ...func(*pulumiv1.Stack)) *pulumiv1.Stack {
	s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Name: "s", Generation: 3}}
	s.Spec.GitSource = &pulumiv1.GitSource{ProjectRepo: "https://example.com/r", Branch: "main"}
	for _, o := range opts {
		o(s)
	}
	return s
}

func last(state pulumiv1.StackUpdateStateMessage, typ autov1alpha1.UpdateType, rev string, failures int64, ago time.Duration) func(*pulumiv1.Stack) {
	return func(s *pulumiv1.Stack) {
		lu := &pulumiv1.StackUpdateState{Generation: s.Generation, Type: typ, State: state, LastAttemptedCommit: rev,
			Failures: failures, LastResyncTime: metav1.NewTime(now.Add(-ago)), Message: "boom"}
		if state == pulumiv1.SucceededStackStateMessage {
			lu.LastSuccessfulCommit = rev
		}
		s.Status.LastUpdate = lu
	}
}

func TestDecide(t *testing.T) {
	ok := pulumiv1.SucceededStackStateMessage
	failed := pulumiv1.FailedStackStateMessage
	cases := []struct {
		name       string
		stack      *pulumiv1.Stack
		rev        string
		want       Action
		wantType   autov1alpha1.UpdateType
		wantReason string
		wantAfter  time.Duration
	}{
		{"first run", stackWith(), revA, Run, autov1alpha1.UpType, "not been updated yet", 0},
		{"first run in preview mode", stackWith(func(s *pulumiv1.Stack) { s.Spec.Preview = true }), revA, Run, autov1alpha1.PreviewType, "not been updated yet", 0},
		{"up to date, branch resync", stackWith(last(ok, "up", revA, 0, time.Minute)), revA, UpToDate, "up", "up to date", DefaultResync},
		{"up to date, custom resync", stackWith(last(ok, "up", revA, 0, time.Minute), func(s *pulumiv1.Stack) { s.Spec.ResyncFrequencySeconds = 300 }), revA, UpToDate, "up", "up to date", 300 * time.Second},
		{"pinned commit never polls", stackWith(last(ok, "up", revA, 0, time.Minute), func(s *pulumiv1.Stack) { s.Spec.Branch, s.Spec.Commit = "", revA }), revA, UpToDate, "up", "up to date", 0},
		{"new commit", stackWith(last(ok, "up", revA, 0, time.Minute)), revB, Run, "up", "new revision bbbbbbb", 0},
		{"spec changed", stackWith(last(ok, "up", revA, 0, time.Minute), func(s *pulumiv1.Stack) { s.Generation = 4 }), revA, Run, "up", "the spec changed (generation 4, last update ran for 3)", 0},
		{"preview turned off", stackWith(last(ok, "preview", revA, 0, time.Minute)), revA, Run, "up", "the last update was a preview", 0},
		{"preview mode, previewed", stackWith(func(s *pulumiv1.Stack) { s.Spec.Preview = true }, last(ok, "preview", revA, 0, time.Minute)), revA, UpToDate, "preview", "up to date", DefaultResync},
		{"reconcile request", stackWith(last(ok, "up", revA, 0, time.Minute), func(s *pulumiv1.Stack) {
			s.Annotations = map[string]string{pulumiv1.ReconcileRequestAnnotation: "2026-11-29T11:00:00Z"}
		}), revA, Run, "up", "reconciliation requested (2026-11-29T11:00:00Z)", 0},
		{"handled reconcile request", stackWith(last(ok, "up", revA, 0, time.Minute), func(s *pulumiv1.Stack) {
			s.Annotations = map[string]string{pulumiv1.ReconcileRequestAnnotation: "r1"}
			s.Status.LastUpdate.ReconcileRequest = "r1"
		}), revA, UpToDate, "up", "up to date", DefaultResync},
		{"first failure, backoff not over", stackWith(last(failed, "up", revA, 1, 3*time.Second)), revA, Retry, "up", "failed (attempt 1 of 5): boom; retrying in 7s", 7 * time.Second},
		{"first failure, backoff over", stackWith(last(failed, "up", revA, 1, 11*time.Second)), revA, Run, "up", "retrying after failure 1 of 5", 0},
		{"third failure waits 40s", stackWith(last(failed, "up", revA, 3, 30*time.Second)), revA, Retry, "up", "retrying in 10s", 10 * time.Second},
		{"backoff capped", stackWith(last(failed, "up", revA, 4, 30*time.Second), func(s *pulumiv1.Stack) { s.Spec.RetryMaxBackoffDurationSeconds = 15 }), revA, Run, "up", "retrying after failure 4", 0},
		{"stalled after 5 failures, still watching the branch", stackWith(last(failed, "up", revA, 5, time.Minute)), revA, Stall, "up", "failed 5 times in a row: boom", DefaultResync},
		{"stalled pinned commit waits for the backoff cap", stackWith(last(failed, "up", revA, 5, 10*time.Minute), func(s *pulumiv1.Stack) { s.Spec.Branch, s.Spec.Commit = "", revA }), revA, Stall, "up", "retrying anyway in 50m0s", 50 * time.Minute},
		{"stalled stack retried at the backoff cap", stackWith(last(failed, "up", revA, 5, time.Hour)), revA, Run, "up", "retrying after 5 failures (at the backoff cap)", 0},
		{"stalled stack, custom cap", stackWith(last(failed, "up", revA, 7, 2*time.Minute), func(s *pulumiv1.Stack) { s.Spec.RetryMaxBackoffDurationSeconds = 60 }), revA, Run, "up", "at the backoff cap", 0},
		{"stalled stack, new commit runs", stackWith(last(failed, "up", revA, 5, time.Hour)), revB, Run, "up", "new revision", 0},
		{"stalled stack, spec change runs", stackWith(last(failed, "up", revA, 5, time.Hour), func(s *pulumiv1.Stack) { s.Generation = 9 }), revA, Run, "up", "the spec changed", 0},
		{"stalled stack, reconcile request runs", stackWith(last(failed, "up", revA, 5, time.Hour), func(s *pulumiv1.Stack) {
			s.Annotations = map[string]string{pulumiv1.ReconcileRequestAnnotation: "retry"}
		}), revA, Run, "up", "reconciliation requested", 0},
		{"continuous resync due", stackWith(last(ok, "up", revA, 0, 2*time.Minute), func(s *pulumiv1.Stack) { s.Spec.ContinueResyncOnCommitMatch = true }), revA, Run, "up", "periodic resync", 0},
		{"continuous resync not due", stackWith(last(ok, "up", revA, 0, 20*time.Second), func(s *pulumiv1.Stack) { s.Spec.ContinueResyncOnCommitMatch = true }), revA, UpToDate, "up", "up to date", 40 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(Input{Stack: tc.stack, Revision: tc.rev, Now: now})
			if d.Action != tc.want || d.UpdateType != tc.wantType || !strings.Contains(d.Reason, tc.wantReason) || d.RequeueAfter != tc.wantAfter {
				t.Fatalf("Decide = {%v %s %q after %s}, want {%v %s %q after %s}", d.Action, d.UpdateType, d.Reason, d.RequeueAfter, tc.want, tc.wantType, tc.wantReason, tc.wantAfter)
			}
		})
	}
}

// TestDecideStatusRules: conflicts, inputs, drift — each decided from the
// Stack's status alone, so a restarted operator decides the same.
func TestDecideStatusRules(t *testing.T) {
	ok := pulumiv1.SucceededStackStateMessage
	failed := pulumiv1.FailedStackStateMessage
	conflict := func(count int64, ago time.Duration, opts ...func(*pulumiv1.StackConflict)) func(*pulumiv1.Stack) {
		return func(s *pulumiv1.Stack) {
			c := &pulumiv1.StackConflict{Update: "s-4", Time: metav1.NewTime(now.Add(-ago)), Count: count, Generation: s.Generation, Revision: revA, InputsDigest: "d1", Message: "locked"}
			for _, o := range opts {
				o(c)
			}
			s.Status.Conflict = c
		}
	}
	retry := func(s *pulumiv1.Stack) { s.Spec.RetryOnUpdateConflict = true }
	digest := func(d string) func(*pulumiv1.Stack) {
		return func(s *pulumiv1.Stack) { s.Status.LastUpdate.InputsDigest = d }
	}
	drift := func(interval int64, remediate bool) func(*pulumiv1.Stack) {
		return func(s *pulumiv1.Stack) {
			s.Spec.DriftDetection = &pulumiv1.DriftDetection{IntervalSeconds: interval, Remediate: remediate}
		}
	}
	checked := func(ago time.Duration, pending bool) func(*pulumiv1.Stack) {
		return func(s *pulumiv1.Stack) {
			s.Status.DriftCheck = &pulumiv1.DriftCheck{LastCheckTime: metav1.NewTime(now.Add(-ago)), RemediationPending: pending}
		}
	}
	cases := []struct {
		name        string
		stack       *pulumiv1.Stack
		inputs      string
		override    time.Duration
		want        Action
		wantPurpose pulumiv1.UpdatePurpose
		wantType    autov1alpha1.UpdateType
		wantCond    string
		wantReason  string
		wantAfter   time.Duration
		wantRefresh bool
	}{
		{"conflict without retry stalls, watching the branch", stackWith(last(ok, "up", revA, 0, time.Hour), digest("d1"), conflict(1, time.Second)), "d1", 0,
			Stall, "", "up", pulumiv1.StalledConflictReason, "set spec.retryOnUpdateConflict", DefaultResync, false},
		{"conflict on the first update stalls too", stackWith(conflict(1, time.Second)), "d1", 0,
			Stall, "", "up", pulumiv1.StalledConflictReason, "another update holds the stack (s-4): locked", DefaultResync, false},
		{"conflict with retry waits its backoff", stackWith(retry, conflict(2, 5*time.Second)), "d1", 0,
			Retry, "", "up", pulumiv1.ReconcilingConflictRetryReason, "conflict 2", 15 * time.Second, false},
		{"conflict with retry runs after the backoff", stackWith(retry, conflict(2, 21*time.Second)), "d1", 0,
			Run, pulumiv1.UpdatePurposeDeploy, "up", "", "retrying after conflict 2", 0, false},
		{"conflict backoff is capped", stackWith(retry, conflict(30, 5*time.Minute+time.Second)), "d1", 0,
			Run, pulumiv1.UpdatePurposeDeploy, "up", "", "retrying after conflict 30", 0, false},
		{"conflict for another revision is over", stackWith(last(ok, "up", revA, 0, time.Hour), digest("d1"), conflict(1, time.Second, func(c *pulumiv1.StackConflict) { c.Revision = revB })), "d1", 0,
			UpToDate, "", "up", "", "up to date", DefaultResync, false},
		{"conflict, then a reconcile request", stackWith(last(ok, "up", revA, 0, time.Hour), digest("d1"), conflict(1, time.Second), func(s *pulumiv1.Stack) {
			s.Annotations = map[string]string{pulumiv1.ReconcileRequestAnnotation: "now"}
		}), "d1", 0, Run, pulumiv1.UpdatePurposeDeploy, "up", "", "reconciliation requested", 0, false},
		{"changed inputs run", stackWith(last(ok, "up", revA, 0, time.Hour), digest("d1")), "d2", 0,
			Run, pulumiv1.UpdatePurposeDeploy, "up", "", "a referenced ConfigMap or Secret changed", 0, false},
		{"changed inputs run a stalled stack at once", stackWith(last(failed, "up", revA, 5, time.Second), digest("d1")), "d2", 0,
			Run, pulumiv1.UpdatePurposeDeploy, "up", "", "a referenced ConfigMap or Secret changed", 0, false},
		{"same inputs, up to date", stackWith(last(ok, "up", revA, 0, time.Hour), digest("d1")), "d1", 0,
			UpToDate, "", "up", "", "up to date", DefaultResync, false},
		{"a record without digest is taken as current", stackWith(last(ok, "up", revA, 0, time.Hour)), "d1", 0,
			UpToDate, "", "up", "", "up to date", DefaultResync, false},
		{"drift check due", stackWith(last(ok, "up", revA, 0, 6*time.Minute), drift(0, false)), "", 0,
			Run, pulumiv1.UpdatePurposeDriftCheck, "preview", "", "drift check", 0, true},
		{"drift check not due: next look at the check", stackWith(last(ok, "up", revA, 0, 6*time.Minute), drift(0, false), checked(4*time.Minute+30*time.Second, false)), "", 0,
			UpToDate, "", "up", "", "up to date", 30 * time.Second, false},
		{"drift check interval from the spec", stackWith(last(ok, "up", revA, 0, 6*time.Minute), drift(3600, false)), "", 0,
			UpToDate, "", "up", "", "up to date", DefaultResync, false},
		{"drift check interval overridden", stackWith(last(ok, "up", revA, 0, 3*time.Second), drift(3600, false)), "", 2 * time.Second,
			Run, pulumiv1.UpdatePurposeDriftCheck, "preview", "", "drift check", 0, true},
		{"no drift check in preview mode", stackWith(last(ok, "preview", revA, 0, time.Hour), drift(0, false), func(s *pulumiv1.Stack) { s.Spec.Preview = true }), "", 0,
			UpToDate, "", "preview", "", "up to date", DefaultResync, false},
		{"pending remediation runs an up with refresh", stackWith(last(ok, "up", revA, 0, time.Minute), drift(0, true), checked(time.Second, true)), "", 0,
			Run, pulumiv1.UpdatePurposeRemediate, "up", "", "remediating drift", 0, true},
		{"pending remediation without remediate is ignored", stackWith(last(ok, "up", revA, 0, time.Minute), drift(0, false), checked(time.Second, true)), "", 0,
			UpToDate, "", "up", "", "up to date", DefaultResync, false},
		{"a new commit deploys without refresh, drift pending or not", stackWith(last(ok, "up", revA, 0, time.Minute), drift(0, false), checked(time.Second, true)), "", 0,
			Run, pulumiv1.UpdatePurposeDeploy, "up", "", "new revision", 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rev := revA
			if strings.HasPrefix(tc.name, "a new commit") {
				rev = revB
			}
			d := Decide(Input{Stack: tc.stack, Revision: rev, InputsDigest: tc.inputs, Now: now, ResyncOverride: tc.override})
			if d.Action != tc.want || d.Purpose != tc.wantPurpose || d.UpdateType != tc.wantType || d.Condition != tc.wantCond ||
				!strings.Contains(d.Reason, tc.wantReason) || d.RequeueAfter != tc.wantAfter || d.Refresh != tc.wantRefresh {
				t.Fatalf("Decide = %+v\nwant {%v %s %s %s %q after %s refresh %v}", d, tc.want, tc.wantPurpose, tc.wantType, tc.wantCond, tc.wantReason, tc.wantAfter, tc.wantRefresh)
			}
		})
	}
}

func TestFailuresAndConflictCount(t *testing.T) {
	prev := &pulumiv1.StackUpdateState{State: pulumiv1.FailedStackStateMessage, Generation: 2, LastAttemptedCommit: revA, InputsDigest: "d", Failures: 3}
	for _, tc := range []struct {
		name string
		gen  int64
		rev  string
		in   string
		want int64
	}{
		{"same everything counts up", 2, revA, "d", 4},
		{"new generation starts again", 3, revA, "d", 1},
		{"new revision starts again", 2, revB, "d", 1},
		{"new inputs start again", 2, revA, "e", 1},
	} {
		if got := Failures(prev, tc.gen, tc.rev, tc.in); got != tc.want {
			t.Errorf("%s: Failures = %d, want %d", tc.name, got, tc.want)
		}
	}
	if Failures(nil, 1, revA, "") != 1 {
		t.Error("first failure")
	}
	c := &pulumiv1.StackConflict{Count: 2, Generation: 2, Revision: revA, InputsDigest: "d", ReconcileRequest: "r"}
	if ConflictCount(c, 2, revA, "d", "r") != 3 || ConflictCount(c, 2, revA, "d", "other") != 1 || ConflictCount(nil, 2, revA, "d", "r") != 1 {
		t.Error("conflict counts")
	}
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		failures int64
		max      time.Duration
		want     time.Duration
	}{
		{1, time.Hour, 10 * time.Second}, {2, time.Hour, 20 * time.Second}, {4, time.Hour, 80 * time.Second},
		{20, time.Hour, time.Hour}, {3, 15 * time.Second, 15 * time.Second}, {0, time.Hour, 10 * time.Second},
	} {
		if got := Backoff(tc.failures, tc.max); got != tc.want {
			t.Errorf("Backoff(%d, %s) = %s, want %s", tc.failures, tc.max, got, tc.want)
		}
	}
}

func TestCheckPrerequisite(t *testing.T) {
	upOK := &pulumiv1.StackUpdateState{Type: "up", State: pulumiv1.SucceededStackStateMessage, LastResyncTime: metav1.NewTime(now.Add(-30 * time.Minute))}
	for _, tc := range []struct {
		name       string
		p          Prerequisite
		want       PrerequisiteVerdict
		wantSubstr string
	}{
		{"missing", Prerequisite{Name: "dev"}, PrerequisiteVerdict{}, "prerequisite dev not found"},
		{"never ran", Prerequisite{Name: "dev", Found: true}, PrerequisiteVerdict{}, "has not been updated yet"},
		{"failed", Prerequisite{Name: "dev", Found: true, LastUpdate: &pulumiv1.StackUpdateState{Type: "up", State: pulumiv1.FailedStackStateMessage}}, PrerequisiteVerdict{}, "last update failed"},
		{"only previewed", Prerequisite{Name: "dev", Found: true, LastUpdate: &pulumiv1.StackUpdateState{Type: "preview", State: pulumiv1.SucceededStackStateMessage}}, PrerequisiteVerdict{}, "last ran a preview"},
		{"succeeded", Prerequisite{Name: "dev", Found: true, LastUpdate: upOK}, PrerequisiteVerdict{Satisfied: true}, ""},
		{"succeeded within 1h", Prerequisite{Name: "dev", Found: true, LastUpdate: upOK, Within: time.Hour}, PrerequisiteVerdict{Satisfied: true}, ""},
		{"stale", Prerequisite{Name: "dev", Found: true, LastUpdate: upOK, Within: 10 * time.Minute}, PrerequisiteVerdict{Resync: true}, "last succeeded 30m0s ago, more than the required 10m0s"},
		{"exporting, exported", Prerequisite{Name: "dev", Found: true, LastUpdate: upOK, Exports: true, ExportsCurrent: true}, PrerequisiteVerdict{Satisfied: true}, ""},
		{"exporting, updating", Prerequisite{Name: "dev", Found: true, LastUpdate: upOK, Exports: true, ExportsCurrent: true, Updating: true}, PrerequisiteVerdict{}, "dev is updating; its exports follow"},
		{"exporting, not yet exported", Prerequisite{Name: "dev", Found: true, LastUpdate: upOK, Exports: true}, PrerequisiteVerdict{}, "has not exported its last update's outputs"},
		{"not exporting, updating (PKO's rule)", Prerequisite{Name: "dev", Found: true, LastUpdate: upOK, Updating: true}, PrerequisiteVerdict{Satisfied: true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckPrerequisite(tc.p, now)
			if got.Satisfied != tc.want.Satisfied || got.Resync != tc.want.Resync || !strings.Contains(got.Message, tc.wantSubstr) {
				t.Fatalf("CheckPrerequisite = %+v, want %+v with %q", got, tc.want, tc.wantSubstr)
			}
		})
	}
}

func TestIdleReclaim(t *testing.T) {
	ended := func(ago time.Duration) *pulumiv1.StackUpdateState {
		return &pulumiv1.StackUpdateState{Name: "s-1", Type: "up", State: pulumiv1.SucceededStackStateMessage, LastResyncTime: metav1.NewTime(now.Add(-ago))}
	}
	for _, tc := range []struct {
		name      string
		spec      pulumiv1.StackSpec
		status    pulumiv1.StackStatus
		def       time.Duration
		reclaim   bool
		wantAfter time.Duration
	}{
		{"off", pulumiv1.StackSpec{}, pulumiv1.StackStatus{LastUpdate: ended(time.Hour)}, 0, false, 0},
		{"operator default, idle", pulumiv1.StackSpec{}, pulumiv1.StackStatus{LastUpdate: ended(time.Hour)}, 30 * time.Minute, true, 0},
		{"operator default, not yet", pulumiv1.StackSpec{}, pulumiv1.StackStatus{LastUpdate: ended(10 * time.Minute)}, 30 * time.Minute, false, 20 * time.Minute},
		{"the Stack's own timeout wins", pulumiv1.StackSpec{WorkspaceIdleTimeoutSeconds: 300}, pulumiv1.StackStatus{LastUpdate: ended(10 * time.Minute)}, time.Hour, true, 0},
		{"a recent drift check keeps it", pulumiv1.StackSpec{WorkspaceIdleTimeoutSeconds: 300},
			pulumiv1.StackStatus{LastUpdate: ended(time.Hour), DriftCheck: &pulumiv1.DriftCheck{LastCheckTime: metav1.NewTime(now.Add(-time.Minute))}}, 0, false, 4 * time.Minute},
		{"never ran", pulumiv1.StackSpec{WorkspaceIdleTimeoutSeconds: 300}, pulumiv1.StackStatus{}, 0, false, 0},
		{"an update in flight", pulumiv1.StackSpec{WorkspaceIdleTimeoutSeconds: 300},
			pulumiv1.StackStatus{LastUpdate: ended(time.Hour), CurrentUpdate: &pulumiv1.CurrentStackUpdate{Name: "s-2"}}, 0, false, 0},
		{"reclaim Delete goes at once anyway", pulumiv1.StackSpec{WorkspaceIdleTimeoutSeconds: 300, WorkspaceReclaimPolicy: pulumiv1.WorkspaceReclaimDelete},
			pulumiv1.StackStatus{LastUpdate: ended(time.Hour)}, 0, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &pulumiv1.Stack{Spec: tc.spec, Status: tc.status}
			reclaim, after := IdleReclaim(s, tc.def, now)
			if reclaim != tc.reclaim || after != tc.wantAfter {
				t.Fatalf("IdleReclaim = %v, %s; want %v, %s", reclaim, after, tc.reclaim, tc.wantAfter)
			}
		})
	}
}
