package stack

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

func TestGate(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	fp, other := strings.Repeat("a", 64), strings.Repeat("b", 64)
	want := Desired{Generation: 2, Revision: "c2", InputsDigest: "d", Purpose: pulumiv1.UpdatePurposeDeploy}
	pending := func(mod ...func(*pulumiv1.StackPlan)) *pulumiv1.StackPlan {
		p := &pulumiv1.StackPlan{Fingerprint: fp, State: pulumiv1.PlanAwaitingApproval, Summary: "+1 ~0 -0", Changes: map[string]int64{"create": 1},
			Generation: 2, Commit: "c2", InputsDigest: "d", Purpose: pulumiv1.UpdatePurposeDeploy,
			ProposedAt: metav1.NewTime(t0), ExpiresAt: metav1.NewTime(t0.Add(time.Hour))}
		for _, m := range mod {
			m(p)
		}
		return p
	}
	approve := func(name, f string, at time.Duration) Verdict {
		return Verdict{Name: name, Fingerprint: f, Approve: true, Approver: "alice", Time: t0.Add(at)}
	}
	reject := func(name string, at time.Duration) Verdict {
		return Verdict{Name: name, Fingerprint: fp, Approver: "bob", Time: t0.Add(at)}
	}
	for _, tc := range []struct {
		name     string
		plan     *pulumiv1.StackPlan
		want     Desired
		verdicts []Verdict
		now      time.Duration
		action   GateAction
		by       string
		reason   string
	}{
		{name: "no plan yet", action: GatePreview},
		{name: "plan of another commit", plan: pending(func(p *pulumiv1.StackPlan) { p.Commit = "c1" }), action: GatePreview, reason: "revision c2"},
		{name: "plan of other inputs", plan: pending(func(p *pulumiv1.StackPlan) { p.InputsDigest = "x" }), action: GatePreview},
		{name: "plan of another generation", plan: pending(func(p *pulumiv1.StackPlan) { p.Generation = 1 }), action: GatePreview},
		{name: "plan for remediation, deploy wanted", plan: pending(func(p *pulumiv1.StackPlan) { p.Purpose = pulumiv1.UpdatePurposeRemediate }), action: GatePreview},
		{name: "a plan that changes nothing needs no approval", plan: pending(func(p *pulumiv1.StackPlan) { p.Changes = nil }), now: time.Minute, action: GateApply, reason: "changes nothing"},
		{name: "pending, no approval", plan: pending(), now: time.Minute, action: GateAwait, reason: "awaiting approval: +1 ~0 -0, plan aaaaaaaaaaaa"},
		{name: "approved", plan: pending(), verdicts: []Verdict{approve("ok", fp, time.Minute)}, now: 2 * time.Minute, action: GateApply, by: "ok"},
		{name: "approval of another fingerprint applies nothing", plan: pending(), verdicts: []Verdict{approve("wrong", other, time.Minute)}, now: 2 * time.Minute,
			action: GateAwait, reason: "PlanApproval wrong names plan bbbbbbbbbbbb, not the pending plan"},
		{name: "approval made before the change was proposed", plan: pending(), verdicts: []Verdict{approve("old", fp, -time.Minute)}, now: time.Minute, action: GateAwait},
		{name: "approval made after expiry", plan: pending(), verdicts: []Verdict{approve("late", fp, 2*time.Hour)}, now: 30 * time.Minute, action: GateAwait},
		{name: "expired", plan: pending(), verdicts: []Verdict{approve("late", fp, time.Hour)}, now: time.Hour, action: GatePreview, reason: "expired"},
		{name: "rejected", plan: pending(), verdicts: []Verdict{reject("no", time.Minute)}, now: 2 * time.Minute, action: GateRejected, by: "no"},
		{name: "approved after the rejection", plan: pending(func(p *pulumiv1.StackPlan) { p.State = pulumiv1.PlanRejected }),
			verdicts: []Verdict{reject("no", time.Minute), approve("yes", fp, 2*time.Minute)}, now: 3 * time.Minute, action: GateApply, by: "yes"},
		{name: "rejected after the approval", plan: pending(), verdicts: []Verdict{approve("yes", fp, time.Minute), reject("no", 2*time.Minute)}, now: 3 * time.Minute, action: GateRejected, by: "no"},
		{name: "same instant: rejection wins", plan: pending(), verdicts: []Verdict{approve("yes", fp, time.Minute), reject("no", time.Minute)}, now: 3 * time.Minute, action: GateRejected, by: "no"},
		{name: "applied plan: its approval is spent", plan: pending(func(p *pulumiv1.StackPlan) { p.State = pulumiv1.PlanApplied }),
			verdicts: []Verdict{approve("yes", fp, time.Minute)}, now: 3 * time.Minute, action: GatePreview, reason: "the last plan is Applied"},
		{name: "applying but never started: the approval still counts", plan: pending(func(p *pulumiv1.StackPlan) { p.State = pulumiv1.PlanApplying }),
			verdicts: []Verdict{approve("yes", fp, time.Minute)}, now: 3 * time.Minute, action: GateApply, by: "yes"},
		{name: "stale plan is previewed again", plan: pending(func(p *pulumiv1.StackPlan) { p.State = pulumiv1.PlanStale }), now: 3 * time.Minute, action: GatePreview},
		{name: "preview failed: backoff", plan: pending(func(p *pulumiv1.StackPlan) {
			p.State, p.Failures, p.CreatedAt, p.Message = pulumiv1.PlanPreviewFailed, 2, metav1.NewTime(t0), "boom"
		}), now: 5 * time.Second, action: GateRetry, reason: "could not make a plan (attempt 2): boom; previewing again in 15s"},
		{name: "preview failed: backoff over", plan: pending(func(p *pulumiv1.StackPlan) {
			p.State, p.Failures, p.CreatedAt = pulumiv1.PlanPreviewFailed, 2, metav1.NewTime(t0)
		}), now: 20 * time.Second, action: GatePreview},
		{name: "failed plan is previewed again", plan: pending(func(p *pulumiv1.StackPlan) { p.State = pulumiv1.PlanFailed }), now: 3 * time.Minute, action: GatePreview},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := want
			if tc.want != (Desired{}) {
				w = tc.want
			}
			d := Gate(tc.plan, w, tc.verdicts, t0.Add(tc.now))
			if d.Action != tc.action {
				t.Fatalf("action %d, want %d (%s)", d.Action, tc.action, d.Reason)
			}
			if tc.by != "" && (d.Verdict == nil || d.Verdict.Name != tc.by) {
				t.Errorf("decided by %+v, want %s", d.Verdict, tc.by)
			}
			if !strings.Contains(d.Reason, tc.reason) {
				t.Errorf("reason %q does not say %q", d.Reason, tc.reason)
			}
			if tc.action == GateAwait && d.RequeueAfter != t0.Add(time.Hour).Sub(t0.Add(tc.now)) {
				t.Errorf("looks again in %s, not at the expiry", d.RequeueAfter)
			}
		})
	}
}

func TestRecordPlan(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	fp := strings.Repeat("a", 64)
	first := RecordPlan(nil, ProposedPlan{Fingerprint: fp, CreatedAt: t0, Desired: Desired{Revision: "c1"}}, time.Hour)
	if !first.ProposedAt.Time.Equal(t0) || !first.ExpiresAt.Time.Equal(t0.Add(time.Hour)) || first.State != pulumiv1.PlanAwaitingApproval {
		t.Fatalf("first plan %+v", first)
	}
	// A new commit with the same change keeps the proposal: its approval counts.
	same := RecordPlan(first, ProposedPlan{Fingerprint: fp, CreatedAt: t0.Add(10 * time.Minute), Desired: Desired{Revision: "c2"}}, time.Hour)
	if !same.ProposedAt.Time.Equal(t0) || !same.ExpiresAt.Time.Equal(t0.Add(time.Hour)) || same.Commit != "c2" {
		t.Errorf("same change: %+v", same)
	}
	// Another change is a new proposal.
	changed := RecordPlan(first, ProposedPlan{Fingerprint: strings.Repeat("b", 64), CreatedAt: t0.Add(10 * time.Minute)}, time.Hour)
	if !changed.ProposedAt.Time.Equal(t0.Add(10 * time.Minute)) {
		t.Errorf("another change kept the proposal: %+v", changed)
	}
	// The same change after expiry, or after its plan ran, is a new proposal.
	late := RecordPlan(first, ProposedPlan{Fingerprint: fp, CreatedAt: t0.Add(2 * time.Hour)}, time.Hour)
	if !late.ProposedAt.Time.Equal(t0.Add(2 * time.Hour)) {
		t.Errorf("expired change kept its proposal: %+v", late)
	}
	ran := first.DeepCopy()
	ran.State = pulumiv1.PlanStale
	again := RecordPlan(ran, ProposedPlan{Fingerprint: fp, CreatedAt: t0.Add(time.Minute)}, time.Hour)
	if !again.ProposedAt.Time.Equal(t0.Add(time.Minute)) {
		t.Errorf("a plan whose up ran kept its proposal: %+v", again)
	}
}
