package verification

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

const (
	shaA = "aaaaaaa1111111111111111111111111111111a1"
	shaB = "bbbbbbb2222222222222222222222222222222b2"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// stack builds a Stack at generation 3 targeting shaA, observed.
func stack(mods ...func(*pulumiv1.Stack)) *pulumiv1.Stack {
	s := &pulumiv1.Stack{
		ObjectMeta: metav1.ObjectMeta{Namespace: "dev", Name: "web", Generation: 3},
		Spec:       pulumiv1.StackSpec{GitSource: &pulumiv1.GitSource{Commit: shaA}},
	}
	s.Status.ObservedGeneration = 3
	for _, m := range mods {
		m(s)
	}
	return s
}

func lastUpdate(state pulumiv1.StackUpdateStateMessage, typ autov1alpha1.UpdateType, commit string, gen int64, mods ...func(*pulumiv1.StackUpdateState)) func(*pulumiv1.Stack) {
	return func(s *pulumiv1.Stack) {
		lu := &pulumiv1.StackUpdateState{
			Generation: gen, Name: "web-7", Type: typ, State: state, LastAttemptedCommit: commit,
			LastResyncTime: metav1.NewTime(now.Add(-time.Minute)), Permalink: "file:///state/web-7",
		}
		if state == pulumiv1.SucceededStackStateMessage {
			lu.LastSuccessfulCommit = commit
		} else {
			lu.Failures = 1
			lu.Message = "error: update failed"
		}
		for _, m := range mods {
			m(lu)
		}
		s.Status.LastUpdate = lu
	}
}

func current(commit string, gen int64, purpose pulumiv1.UpdatePurpose) func(*pulumiv1.Stack) {
	return func(s *pulumiv1.Stack) {
		s.Status.CurrentUpdate = &pulumiv1.CurrentStackUpdate{Name: "web-8", Commit: commit, Generation: gen, Number: 8, Purpose: purpose}
	}
}

func stalled(reason string, gen int64) func(*pulumiv1.Stack) {
	return func(s *pulumiv1.Stack) {
		s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{Type: pulumiv1.StalledCondition, Status: metav1.ConditionTrue, Reason: reason, Message: "the update failed 5 times in a row", ObservedGeneration: gen})
	}
}

func gated(s *pulumiv1.Stack) { s.Spec.Approval = &pulumiv1.ApprovalPolicy{Required: true} }

func plan(state pulumiv1.PlanState, commit string, gen int64) func(*pulumiv1.Stack) {
	return func(s *pulumiv1.Stack) {
		s.Status.Plan = &pulumiv1.StackPlan{
			Fingerprint: "3f9a0c1d2e4b5a6978c0d1e2f3a4b5c6d7e8f90112233445566778899aabbccd", State: state, Summary: "+1 ~2 -0",
			Commit: commit, Generation: gen, ExpiresAt: metav1.NewTime(now.Add(24 * time.Hour)), Failures: 1, Message: "preview failed",
		}
	}
}

// exports gives the Stack spec.exports: a ConfigMap web-outputs and a
// Secret web-secrets.
func exports(s *pulumiv1.Stack) {
	s.Spec.Exports = &pulumiv1.StackExports{
		ConfigMap: &pulumiv1.ExportObject{Name: "web-outputs", Keys: []pulumiv1.ExportKey{{Key: "url", Output: "endpoint"}}},
		Secret:    &pulumiv1.ExportObject{Name: "web-secrets", Keys: []pulumiv1.ExportKey{{Key: "db-url", Output: "connectionString"}}},
	}
}

// exported records in status.exports the export of update (reason "": both
// objects written).
func exported(update, reason string) func(*pulumiv1.Stack) {
	return func(s *pulumiv1.Stack) {
		e := &pulumiv1.StackExportsStatus{Update: update, Commit: shaA, Time: metav1.NewTime(now.Add(-30 * time.Second)), Reason: reason}
		switch reason {
		case "":
			e.ConfigMap = &pulumiv1.ExportedObject{Name: "web-outputs", Hash: "c0ffee"}
			e.Secret = &pulumiv1.ExportedObject{Name: "web-secrets", Hash: "5ec7e7"}
		case pulumiv1.ExportConflictReason:
			e.Message = "the outputs of " + update + " were not exported: ConfigMap web-outputs exists and was not created by this Stack"
		default:
			e.Message = "the outputs of " + update + ` were not exported: output "connectionString" is a secret and key db-url is in the ConfigMap`
		}
		s.Status.Exports = e
	}
}

func branch(s *pulumiv1.Stack)  { s.Spec.GitSource.Commit = ""; s.Spec.GitSource.Branch = "main" }
func preview(s *pulumiv1.Stack) { s.Spec.Preview = true }
func generation(g int64) func(*pulumiv1.Stack) {
	return func(s *pulumiv1.Stack) { s.Generation = g }
}

func TestVerify(t *testing.T) {
	up := Query{Commit: shaA[:7], Operation: OperationUp}
	pv := Query{Commit: shaA, Operation: OperationPreview}
	within := func(q Query, d time.Duration) Query { q.Within = d; return q }
	notFoundAfter := func(q Query, t time.Time) Query { q.NotFoundAfter = t; return q }
	failures := func(n int64) func(*pulumiv1.StackUpdateState) {
		return func(lu *pulumiv1.StackUpdateState) { lu.Failures = n }
	}
	message := func(m string) func(*pulumiv1.StackUpdateState) {
		return func(lu *pulumiv1.StackUpdateState) { lu.Message = m }
	}
	tests := []struct {
		name   string
		stack  *pulumiv1.Stack
		q      Query
		phase  Phase
		reason string
		// msg is a substring of the message.
		msg string
	}{
		{"no stack yet", nil, up, PhasePending, ReasonStackNotFound, "does not exist yet"},
		// The caller's grace (notFoundAfter): Pending before, Failed from
		// the instant it names, naming the Stack.
		{"no stack, grace not over", nil, notFoundAfter(up, now.Add(time.Second)), PhasePending, ReasonStackNotFound, "fails if it still does not at 2026-12-01T12:00:01Z"},
		{"no stack, grace ends now", nil, notFoundAfter(up, now), PhaseFailed, ReasonStackNotFound, "Stack dev/web does not exist, and the caller waited for it until 2026-12-01T12:00:00Z"},
		{"no stack, grace over", nil, notFoundAfter(pv, now.Add(-time.Hour)), PhaseFailed, ReasonStackNotFound, "stackNamespace and stackName"},
		// A Stack that exists is judged on its own, whatever the grace.
		{"stack, grace over", stack(lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3)), notFoundAfter(up, now.Add(-time.Hour)), PhaseSucceeded, ReasonUpdateSucceeded, ""},
		{"stack not there yet, grace over", stack(func(s *pulumiv1.Stack) { s.Spec.GitSource.Commit = shaB }), notFoundAfter(up, now.Add(-time.Hour)), PhasePending, ReasonCommitNotTargeted, ""},
		{"deleting", stack(func(s *pulumiv1.Stack) { s.DeletionTimestamp = &metav1.Time{Time: now} }), up, PhaseFailed, ReasonStackDeleting, "being deleted"},
		{"targets another commit", stack(func(s *pulumiv1.Stack) { s.Spec.GitSource.Commit = shaB }), up, PhasePending, ReasonCommitNotTargeted, "targets commit bbbbbbb"},
		{"generation not observed", stack(generation(4)), up, PhasePending, ReasonGenerationNotObserved, "generation 4"},
		{"in flight for the current generation", stack(generation(4), current(shaA, 4, pulumiv1.UpdatePurposeDeploy)), up, PhaseRunning, ReasonUpdateInProgress, "up of aaaaaaa is running"},
		{"in flight for an older generation", stack(generation(4), current(shaA, 3, pulumiv1.UpdatePurposeDeploy)), up, PhasePending, ReasonGenerationNotObserved, ""},
		{"retry in flight counts the attempt", stack(current(shaA, 3, pulumiv1.UpdatePurposeDeploy), lastUpdate(pulumiv1.FailedStackStateMessage, autov1alpha1.UpType, shaA, 3, failures(2))), up, PhaseRunning, ReasonUpdateInProgress, "attempt 3, after 2 failures"},
		{"remediation in flight is running", stack(current(shaA, 3, pulumiv1.UpdatePurposeRemediate), lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3)), up, PhaseRunning, ReasonUpdateInProgress, ""},
		{"drift check in flight does not hide the success", stack(current(shaA, 3, pulumiv1.UpdatePurposeDriftCheck), lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3)), up, PhaseSucceeded, ReasonUpdateSucceeded, ""},
		{"succeeded", stack(lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3)), up, PhaseSucceeded, ReasonUpdateSucceeded, "up of aaaaaaa succeeded"},
		{"succeeded, full SHA asked", stack(lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3)), Query{Commit: shaA, Operation: OperationUp}, PhaseSucceeded, ReasonUpdateSucceeded, ""},
		{"succeeded within the window", stack(lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3)), within(up, 5*time.Minute), PhaseSucceeded, ReasonUpdateSucceeded, ""},
		{"succeeded outside the window", stack(lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3)), within(up, 30*time.Second), PhasePending, ReasonSucceededOutsideWindow, "longer ago than 30s"},
		{"succeeded for a superseded generation", stack(generation(4), func(s *pulumiv1.Stack) { s.Status.ObservedGeneration = 4 }, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3)), up, PhasePending, ReasonAwaitingUpdate, "generation 4"},
		{"succeeded at another commit", stack(lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaB, 3)), up, PhasePending, ReasonAwaitingUpdate, "has not run up of aaaaaaa"},
		{"failed, retried", stack(lastUpdate(pulumiv1.FailedStackStateMessage, autov1alpha1.UpType, shaA, 3, failures(2))), up, PhaseRunning, ReasonRetryingAfterFailure, "attempt 2 of 5"},
		// observedGeneration is set when Ready or Stalled only.
		{"failed, retried, generation not yet marked observed", stack(func(s *pulumiv1.Stack) { s.Status.ObservedGeneration = 0 }, lastUpdate(pulumiv1.FailedStackStateMessage, autov1alpha1.UpType, shaA, 3)), up, PhaseRunning, ReasonRetryingAfterFailure, "attempt 1 of 5"},
		{"conflict before the first result", stack(func(s *pulumiv1.Stack) {
			s.Status.ObservedGeneration = 0
			s.Status.Conflict = &pulumiv1.StackConflict{Update: "web-1", Count: 1, Generation: 3, Revision: shaA}
		}), up, PhaseRunning, ReasonRetryingAfterConflict, ""},
		{"failed 5 times: stalled", stack(lastUpdate(pulumiv1.FailedStackStateMessage, autov1alpha1.UpType, shaA, 3, failures(5)), stalled(pulumiv1.StalledUpdateFailedReason, 3)), up, PhaseFailed, ReasonStackStalled, "UpdateFailed"},
		{"retry at the cap after the stall", stack(current(shaA, 3, pulumiv1.UpdatePurposeDeploy), lastUpdate(pulumiv1.FailedStackStateMessage, autov1alpha1.UpType, shaA, 3, failures(6))), up, PhaseFailed, ReasonStackStalled, "retry at the backoff cap is running"},
		{"failed 5 times, Stalled condition not written yet", stack(lastUpdate(pulumiv1.FailedStackStateMessage, autov1alpha1.UpType, shaA, 3, failures(5))), up, PhaseFailed, ReasonStackStalled, "failed 5 times"},
		{"stalled on an old generation does not count", stack(generation(4), func(s *pulumiv1.Stack) { s.Status.ObservedGeneration = 4 }, stalled(pulumiv1.StalledUpdateFailedReason, 3)), up, PhasePending, ReasonAwaitingUpdate, ""},
		{"stalled on the spec", stack(stalled(pulumiv1.StalledSpecInvalidReason, 3)), up, PhaseFailed, ReasonStackStalled, "SpecInvalid"},
		{"expectNoChanges violated", stack(lastUpdate(pulumiv1.FailedStackStateMessage, autov1alpha1.UpType, shaA, 3, message("error: no changes were expected but changes were proposed"))), up, PhaseFailed, ReasonChangesNotExpected, ""},
		{"policy violation", stack(lastUpdate(pulumiv1.FailedStackStateMessage, autov1alpha1.UpType, shaA, 3, message("error: preview failed: 1 mandatory policy violation"))), up, PhaseFailed, ReasonPolicyViolation, ""},
		{"conflict, retried", stack(func(s *pulumiv1.Stack) {
			s.Status.Conflict = &pulumiv1.StackConflict{Update: "web-9", Count: 2, Generation: 3, Revision: shaA}
		}), up, PhaseRunning, ReasonRetryingAfterConflict, "2 in a row"},
		{"up asked of a preview stack", stack(preview, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.PreviewType, shaA, 3)), up, PhaseFailed, ReasonOperationMismatch, "previews only"},
		{"preview asked of an up stack", stack(lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3)), pv, PhaseFailed, ReasonOperationMismatch, "operation=up"},
		{"preview succeeded", stack(preview, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.PreviewType, shaA, 3)), pv, PhaseSucceeded, ReasonUpdateSucceeded, "preview of aaaaaaa succeeded"},
		// PKO records lastSuccessfulCommit for previews too: not an up.
		{"lastSuccessfulCommit of a preview is no up", stack(func(s *pulumiv1.Stack) { s.Spec.Preview = false }, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.PreviewType, shaA, 3)), up, PhasePending, ReasonAwaitingUpdate, ""},
		{"preview in flight", stack(preview, current(shaA, 3, pulumiv1.UpdatePurposeDeploy)), pv, PhaseRunning, ReasonUpdateInProgress, "preview of aaaaaaa is running"},
		{"branch: ran the commit", stack(branch, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3)), up, PhaseSucceeded, ReasonUpdateSucceeded, ""},
		{"branch: ran another commit", stack(branch, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaB, 3)), up, PhasePending, ReasonAwaitingUpdate, "tracks branch main; its last update ran bbbbbbb"},
		{"branch: running the commit", stack(branch, current(shaA, 3, pulumiv1.UpdatePurposeDeploy), lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaB, 3)), up, PhaseRunning, ReasonUpdateInProgress, ""},
		{"branch: stalled on another commit", stack(branch, lastUpdate(pulumiv1.FailedStackStateMessage, autov1alpha1.UpType, shaB, 3, failures(5)), stalled(pulumiv1.StalledUpdateFailedReason, 3)), up, PhasePending, ReasonAwaitingUpdate, "stalled on another commit"},
		{"branch: stalled on the commit", stack(branch, lastUpdate(pulumiv1.FailedStackStateMessage, autov1alpha1.UpType, shaA, 3, failures(5)), stalled(pulumiv1.StalledUpdateFailedReason, 3)), up, PhaseFailed, ReasonStackStalled, ""},
		// spec.approval.required: a plan waiting is Pending with its
		// summary; a rejected or unapplied plan is Failed.
		{"plan being previewed", stack(gated, current(shaA, 3, pulumiv1.UpdatePurposePlan)), up, PhasePending, ReasonAwaitingApproval, "aaaaaaa is being previewed to save a plan for approval"},
		{"plan awaiting approval", stack(gated, plan(pulumiv1.PlanAwaitingApproval, shaA, 3)), up, PhasePending, ReasonAwaitingApproval, "awaiting approval: +1 ~2 -0, plan 3f9a0c1d2e4b (expires 2026-12-02T12:00:00Z)"},
		{"plan of another commit awaiting", stack(branch, gated, plan(pulumiv1.PlanAwaitingApproval, shaB, 3), lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaB, 3)), up, PhasePending, ReasonAwaitingUpdate, ""},
		{"plan could not be made", stack(gated, plan(pulumiv1.PlanPreviewFailed, shaA, 3)), up, PhasePending, ReasonAwaitingApproval, "could not make a plan"},
		{"plan rejected", stack(gated, plan(pulumiv1.PlanRejected, shaA, 3), stalled(pulumiv1.StalledPlanRejectedReason, 3)), up, PhaseFailed, ReasonStackStalled, "PlanRejected"},
		{"approved plan stale", stack(gated, plan(pulumiv1.PlanAwaitingApproval, shaA, 3), lastUpdate(pulumiv1.FailedStackStateMessage, autov1alpha1.UpType, shaA, 3,
			message("create is not allowed by the plan: this resource is constrained to same"))), up, PhaseFailed, ReasonPlanNotApplied, "was not applied"},
		{"approved plan applying", stack(gated, plan(pulumiv1.PlanApplying, shaA, 3), current(shaA, 3, pulumiv1.UpdatePurposeDeploy)), up, PhaseRunning, ReasonUpdateInProgress, ""},
		{"approved plan applied", stack(gated, plan(pulumiv1.PlanApplied, shaA, 3), lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3)), up, PhaseSucceeded, ReasonUpdateSucceeded, ""},
		// spec.exports: the commit is applied once the update's outputs
		// are exported. A Stack without it is judged as before.
		{"exports: exported", stack(exports, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3), exported("web-7", "")), up, PhaseSucceeded, ReasonUpdateSucceeded, "up of aaaaaaa succeeded"},
		{"exports: not written yet", stack(exports, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3)), up, PhaseRunning, ReasonExportsPending,
			"up of aaaaaaa succeeded; the outputs of update web-7 are not yet written to ConfigMap web-outputs and Secret web-secrets"},
		{"exports: an older update's refusal recorded", stack(exports, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3), exported("web-6", pulumiv1.ExportRefusedReason)), up, PhaseRunning, ReasonExportsPending, "update web-7"},
		{"exports: refused, stalled", stack(exports, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3), exported("web-7", pulumiv1.ExportRefusedReason), stalled(pulumiv1.StalledExportFailedReason, 3)), up, PhaseFailed, ReasonExportFailed,
			`up of aaaaaaa succeeded, but its outputs were not exported (ExportRefused): the outputs of web-7 were not exported: output "connectionString" is a secret`},
		{"exports: refused, Stalled condition not written yet", stack(exports, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3), exported("web-7", pulumiv1.ExportRefusedReason)), up, PhaseFailed, ReasonExportFailed, "(ExportRefused)"},
		{"exports: conflict", stack(exports, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3), exported("web-7", pulumiv1.ExportConflictReason), stalled(pulumiv1.StalledExportFailedReason, 3)), up, PhaseFailed, ReasonExportFailed,
			"(ExportConflict): the outputs of web-7 were not exported: ConfigMap web-outputs exists and was not created by this Stack"},
		{"exports: refused, outside the window", stack(exports, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3), exported("web-7", pulumiv1.ExportRefusedReason)), within(up, 30*time.Second), PhaseFailed, ReasonExportFailed, ""},
		{"exports: exported, outside the window", stack(exports, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3), exported("web-7", "")), within(up, 30*time.Second), PhasePending, ReasonSucceededOutsideWindow, ""},
		{"exports: update in flight", stack(exports, current(shaA, 3, pulumiv1.UpdatePurposeDeploy), exported("web-6", "")), up, PhaseRunning, ReasonUpdateInProgress, ""},
		{"exports: failed update, retried", stack(exports, lastUpdate(pulumiv1.FailedStackStateMessage, autov1alpha1.UpType, shaA, 3, failures(2)), exported("web-6", "")), up, PhaseRunning, ReasonRetryingAfterFailure, ""},
		{"exports: branch, refused on another commit", stack(branch, exports, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaB, 3), exported("web-7", pulumiv1.ExportRefusedReason), stalled(pulumiv1.StalledExportFailedReason, 3)), up, PhasePending, ReasonAwaitingUpdate, "stalled on another commit (bbbbbbb)"},
		{"exports: branch, refused on the commit", stack(branch, exports, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3), exported("web-7", pulumiv1.ExportRefusedReason), stalled(pulumiv1.StalledExportFailedReason, 3)), up, PhaseFailed, ReasonExportFailed, ""},
		// A Stalled condition the export record no longer bears out is
		// quoted as any other stall.
		{"exports: exported, Stalled ExportFailed left", stack(exports, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3), exported("web-7", ""), stalled(pulumiv1.StalledExportFailedReason, 3)), up, PhaseFailed, ReasonStackStalled, "ExportFailed"},
		{"exports: stalled on the spec after the refusal", stack(exports, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3), exported("web-7", pulumiv1.ExportRefusedReason), stalled(pulumiv1.StalledSpecInvalidReason, 3)), up, PhaseFailed, ReasonStackStalled, "SpecInvalid"},
		// A preview makes no outputs: nothing to export.
		{"exports: preview stack", stack(preview, exports, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.PreviewType, shaA, 3)), pv, PhaseSucceeded, ReasonUpdateSucceeded, ""},
		{"no spec.exports, a record left in status", stack(lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3), exported("web-7", pulumiv1.ExportRefusedReason)), up, PhaseSucceeded, ReasonUpdateSucceeded, ""},
		{"dependency cycle", stack(exports, stalled(pulumiv1.StalledDependencyCycleReason, 3)), up, PhaseFailed, ReasonStackStalled, "DependencyCycle"},
		{"flux revision", stack(func(s *pulumiv1.Stack) { s.Spec.GitSource = nil }, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, "main@sha1:"+shaA, 3)), up, PhaseSucceeded, ReasonUpdateSucceeded, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Verify(Input{Namespace: "dev", Name: "web", Stack: tt.stack, Query: tt.q, Now: now, Update: func(string) *autov1alpha1.Update { return nil }})
			if got.Phase != tt.phase || got.Reason != tt.reason {
				t.Fatalf("got %s/%s (%s), want %s/%s", got.Phase, got.Reason, got.Message, tt.phase, tt.reason)
			}
			if !strings.Contains(got.Message, tt.msg) {
				t.Fatalf("message %q does not contain %q", got.Message, tt.msg)
			}
			if (got.Reason == ReasonAwaitingApproval || got.Reason == ReasonPlanNotApplied || got.StalledReason == pulumiv1.StalledPlanRejectedReason) != (got.Plan != nil) &&
				tt.name != "plan being previewed" {
				t.Fatalf("reason %s with plan %+v: the approval answers, and they only, describe the plan", got.Reason, got.Plan)
			}
			if (got.Reason == ReasonStackStalled) != (got.StalledReason != "") {
				t.Fatalf("reason %s with stalledReason %q: StackStalled answers, and they only, carry it", got.Reason, got.StalledReason)
			}
			if (got.Reason == ReasonExportsPending || got.Reason == ReasonExportFailed) && got.Exports == nil ||
				got.Exports != nil && (tt.stack.Spec.Exports == nil || got.Reason == ReasonStackStalled) {
				t.Fatalf("reason %s with exports %+v: the export answers, and the successes of Stacks with spec.exports only, describe the export", got.Reason, got.Exports)
			}
		})
	}
}

// TestVerifyDescribesTheExport: the answer names the exported objects and,
// once they hold the update's outputs, their hashes; never the outputs'
// names or the data keys; the operator's refusal is quoted masked.
func TestVerifyDescribesTheExport(t *testing.T) {
	q := Query{Commit: shaA, Operation: OperationUp}
	verify := func(s *pulumiv1.Stack) Result {
		t.Helper()
		return Verify(Input{Namespace: "dev", Name: "web", Stack: s, Query: q, Now: now, Update: func(string) *autov1alpha1.Update { return nil }})
	}
	succeeded := lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3)
	when := now.Add(-30 * time.Second)
	for _, tt := range []struct {
		name  string
		stack *pulumiv1.Stack
		want  Exports
	}{
		{"exported", stack(exports, succeeded, exported("web-7", "")), Exports{Update: "web-7", State: ExportStateExported, Time: &when,
			ConfigMap: &ExportedObject{Name: "web-outputs", Hash: "c0ffee"}, Secret: &ExportedObject{Name: "web-secrets", Hash: "5ec7e7"}}},
		{"pending", stack(exports, succeeded, exported("web-6", "")), Exports{Update: "web-7", State: ExportStatePending,
			ConfigMap: &ExportedObject{Name: "web-outputs"}, Secret: &ExportedObject{Name: "web-secrets"}}},
		{"refused", stack(exports, succeeded, exported("web-7", pulumiv1.ExportConflictReason)), Exports{Update: "web-7", State: ExportStateRefused, Reason: pulumiv1.ExportConflictReason, Time: &when,
			ConfigMap: &ExportedObject{Name: "web-outputs"}, Secret: &ExportedObject{Name: "web-secrets"}}},
		{"secret only", stack(exports, func(s *pulumiv1.Stack) { s.Spec.Exports.ConfigMap = nil }, succeeded, exported("web-7", "")), Exports{Update: "web-7", State: ExportStateExported, Time: &when,
			Secret: &ExportedObject{Name: "web-secrets", Hash: "5ec7e7"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := verify(tt.stack)
			a, _ := json.Marshal(got.Exports)
			b, _ := json.Marshal(tt.want)
			if string(a) != string(b) {
				t.Fatalf("exports = %s, want %s", a, b)
			}
			all, _ := json.Marshal(got)
			for _, never := range []string{"connectionString", "endpoint", "db-url"} {
				if strings.Contains(string(all), never) && !strings.Contains(got.Message, never) {
					t.Fatalf("the answer names %q outside the operator's message: %s", never, all)
				}
			}
		})
	}

	s := stack(exports, succeeded, exported("web-7", pulumiv1.ExportRefusedReason), func(s *pulumiv1.Stack) {
		s.Status.Exports.Message = "the outputs of web-7 were not exported: the API server refused Secret web-secrets: password=hunter2 " + strings.Repeat("x", 500)
	})
	got := verify(s)
	if got.Reason != ReasonExportFailed || strings.Contains(got.Message, "hunter2") || !strings.Contains(got.Message, redacted) || len(got.Message) > 400 {
		t.Fatalf("the refusal is quoted unmasked or unbounded: %s %q", got.Reason, got.Message)
	}
}

func TestVerifyRetryTime(t *testing.T) {
	s := stack(lastUpdate(pulumiv1.FailedStackStateMessage, autov1alpha1.UpType, shaA, 3, func(lu *pulumiv1.StackUpdateState) { lu.Failures = 3 }))
	got := Verify(Input{Stack: s, Query: Query{Commit: shaA, Operation: OperationUp}, Now: now, Update: func(string) *autov1alpha1.Update { return nil }})
	if got.Retry == nil || got.Retry.Attempt != 3 || got.Retry.StallsAfter != pulumiv1.RetryStallAfter {
		t.Fatalf("retry = %+v", got.Retry)
	}
	// Third failure: 10s doubled twice after the failure a minute ago.
	if want := now.Add(-time.Minute).Add(40 * time.Second); !got.Retry.NextTime.Equal(want) {
		t.Fatalf("next retry %s, want %s", got.Retry.NextTime, want)
	}
}

func TestVerifyDescribesTheUpdate(t *testing.T) {
	start, end := metav1.NewTime(now.Add(-2*time.Minute)), metav1.NewTime(now.Add(-time.Minute))
	u := &autov1alpha1.Update{ObjectMeta: metav1.ObjectMeta{Name: "web-7"}, Spec: autov1alpha1.UpdateSpec{Type: autov1alpha1.UpType}}
	u.Status = autov1alpha1.UpdateStatus{StartTime: start, EndTime: end, Permalink: "https://app.example/web/7", Outputs: "web-7-stack-outputs",
		Changes: map[string]int64{"create": 2, "same": 5, "delete": 1, "replace": 1, "create-replacement": 1, "delete-replaced": 1}}
	u.Status.Conditions = []metav1.Condition{
		{Type: autov1alpha1.UpdateConditionTypeComplete, Status: metav1.ConditionTrue},
		{Type: autov1alpha1.UpdateConditionTypeFailed, Status: metav1.ConditionFalse},
	}
	s := stack(lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3))
	got := Verify(Input{Namespace: "dev", Name: "web", Stack: s, Query: Query{Commit: shaA[:10], Operation: OperationUp}, Now: now,
		Update: func(name string) *autov1alpha1.Update {
			if name == "web-7" {
				return u
			}
			return nil
		}})
	want := Update{Name: "web-7", Type: "up", State: UpdateStateSucceeded, Permalink: "https://app.example/web/7",
		Changes: &Changes{Create: 2, Delete: 1, Replace: 1, Same: 5}}
	if got.Update == nil || got.Update.Name != want.Name || got.Update.State != want.State || got.Update.Permalink != want.Permalink || *got.Update.Changes != *want.Changes {
		t.Fatalf("update = %+v, want %+v", got.Update, want)
	}
	if !got.Update.StartTime.Equal(start.Time) || !got.Update.EndTime.Equal(end.Time) {
		t.Fatalf("times %v–%v", got.Update.StartTime, got.Update.EndTime)
	}
	if got.ObservedCommit.SHA != shaA || got.ObservedCommit.Short != "aaaaaaa" || got.RequestedCommit.SHA != shaA[:10] {
		t.Fatalf("commits %+v %+v", got.ObservedCommit, got.RequestedCommit)
	}
	if got.Stack.LastSuccessfulCommit.SHA != shaA || got.Stack.Generation != 3 || got.Stack.ObservedGeneration != 3 {
		t.Fatalf("stack %+v", got.Stack)
	}
	b, _ := json.Marshal(got)
	if strings.Contains(string(b), "outputs") {
		t.Fatalf("the answer mentions outputs: %s", b)
	}
}

// The Update object is gone (TTL): the Stack's record describes it.
func TestVerifyUpdateDeleted(t *testing.T) {
	s := stack(lastUpdate(pulumiv1.FailedStackStateMessage, autov1alpha1.UpType, shaA, 3))
	got := Verify(Input{Stack: s, Query: Query{Commit: shaA, Operation: OperationUp}, Now: now, Update: func(string) *autov1alpha1.Update { return nil }})
	if got.Update == nil || got.Update.Name != "web-7" || got.Update.State != "failed" || got.Update.Changes != nil || got.Update.Permalink != "file:///state/web-7" {
		t.Fatalf("update = %+v", got.Update)
	}
}

func TestSummary(t *testing.T) {
	for _, tt := range []struct {
		name   string
		stack  *pulumiv1.Stack
		phase  Phase
		reason string
	}{
		{"missing", nil, PhasePending, ReasonStackNotFound},
		{"never ran", stack(branch), PhasePending, ReasonAwaitingUpdate},
		{"succeeded", stack(lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3)), PhaseSucceeded, ReasonUpdateSucceeded},
		{"branch running", stack(branch, current(shaB, 3, pulumiv1.UpdatePurposeDeploy)), PhaseRunning, ReasonUpdateInProgress},
		{"preview stack", stack(preview, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.PreviewType, shaA, 3)), PhaseSucceeded, ReasonUpdateSucceeded},
		{"exports pending", stack(exports, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3)), PhaseRunning, ReasonExportsPending},
		{"exports refused", stack(exports, lastUpdate(pulumiv1.SucceededStackStateMessage, autov1alpha1.UpType, shaA, 3), exported("web-7", pulumiv1.ExportRefusedReason), stalled(pulumiv1.StalledExportFailedReason, 3)), PhaseFailed, ReasonExportFailed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Summary(Input{Namespace: "dev", Name: "web", Stack: tt.stack, Now: now, Update: func(string) *autov1alpha1.Update { return nil }})
			if got.Phase != tt.phase || got.Reason != tt.reason || got.RequestedCommit != nil || got.Stack.Name != "web" {
				t.Fatalf("got %+v", got)
			}
		})
	}
}

func changes(c map[string]int64) func(*pulumiv1.Stack) {
	return func(s *pulumiv1.Stack) { s.Status.Plan.Changes = c; s.Status.Plan.Summary = "+0 ~1 -1 ±1" }
}

// TestVerifyDenyOn: denyOn fails a plan with a denied operation while it
// awaits approval (nothing applied), says so of one approved already, lets
// other plans take their course, and fails at once for a Stack that applies
// without a plan.
func TestVerifyDenyOn(t *testing.T) {
	gated := func(s *pulumiv1.Stack) { s.Spec.Approval = &pulumiv1.ApprovalPolicy{Required: true} }
	deleting := changes(map[string]int64{"update": 1, "delete": 1})
	replacing := changes(map[string]int64{"replace": 2})
	q := func(deny ...string) Query { return Query{Commit: shaA, Operation: OperationUp, DenyOn: deny} }
	tests := []struct {
		name   string
		stack  *pulumiv1.Stack
		q      Query
		phase  Phase
		reason string
		msg    string
	}{
		{"deleting plan awaiting approval", stack(gated, plan(pulumiv1.PlanAwaitingApproval, shaA, 3), deleting), q("delete"), PhaseFailed, ReasonPlanDenied,
			"the plan of aaaaaaa (+0 ~1 -1 ±1, plan 3f9a0c1d2e4b) has resources 1 to delete, which denyOn=delete refuses; nothing of it was applied: the Stack awaits approval of it until 2026-12-02T12:00:00Z"},
		{"replacing plan, denyOn delete", stack(gated, plan(pulumiv1.PlanAwaitingApproval, shaA, 3), replacing), q("delete"), PhaseFailed, ReasonPlanDenied, "2 to delete"},
		{"replacing plan, denyOn replace", stack(gated, plan(pulumiv1.PlanAwaitingApproval, shaA, 3), replacing), q("replace"), PhaseFailed, ReasonPlanDenied, "2 to replace"},
		{"deleting plan, denyOn create", stack(gated, plan(pulumiv1.PlanAwaitingApproval, shaA, 3), deleting), q("create"), PhasePending, ReasonAwaitingApproval, ""},
		{"deleting plan approved already", stack(gated, plan(pulumiv1.PlanApplying, shaA, 3), deleting, current(shaA, 3, pulumiv1.UpdatePurposeDeploy)), q("delete"), PhaseFailed, ReasonPlanDenied, "approved already"},
		{"plan of another commit", stack(gated, plan(pulumiv1.PlanAwaitingApproval, shaB, 3), deleting), q("delete"), PhasePending, "", ""},
		{"plan being made", stack(gated, current(shaA, 3, pulumiv1.UpdatePurposePlan)), q("delete"), PhasePending, ReasonAwaitingApproval, ""},
		{"no approval required", stack(), q("delete"), PhaseFailed, ReasonApprovalNotRequired, "denyOn=delete needs a Stack that requires approval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Verify(Input{Namespace: "dev", Name: "web", Stack: tt.stack, Query: tt.q, Now: now, Update: func(string) *autov1alpha1.Update { return nil }})
			if got.Phase != tt.phase || tt.reason != "" && got.Reason != tt.reason || !strings.Contains(got.Message, tt.msg) {
				t.Fatalf("got %s/%s %q, want %s/%s containing %q", got.Phase, got.Reason, got.Message, tt.phase, tt.reason, tt.msg)
			}
			if got.Reason == ReasonPlanDenied && (got.Plan == nil || got.Plan.Changes == nil) {
				t.Fatalf("a denial without the plan's counts: %+v", got.Plan)
			}
		})
	}
}
