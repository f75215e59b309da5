package verification

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stackflow-io/stackflow/internal/conditions"
	"github.com/stackflow-io/stackflow/internal/revision"
	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// Input is what a verification looks at.
type Input struct {
	// Namespace and Name name the Stack asked about (Stack may be nil).
	Namespace, Name string
	// Stack is the Stack, nil when it does not exist.
	Stack *pulumiv1.Stack
	// Update returns the Update object of that name in the Stack's
	// namespace, nil when there is none (finished Updates are deleted after
	// their TTL).
	Update func(name string) *autov1alpha1.Update
	// Query is the request.
	Query Query
	// Now is the clock.
	Now time.Time
}

// stackNotFound answers for a Stack that does not exist. Without
// NotFoundAfter it may yet appear (Argo CD has not synced it), so the answer
// is Pending and the caller's own deadline ends the wait. With it, the
// caller says how long a missing Stack is worth waiting for: a mistyped name
// or namespace would otherwise hold a promotion until that deadline.
func stackNotFound(r Result, in Input) Result {
	q := in.Query
	switch {
	case q.NotFoundIsFinal(in.Now):
		return r.with(PhaseFailed, ReasonStackNotFound, "Stack %s/%s does not exist, and the caller waited for it until %s (notFoundAfter): check its namespace and name (in Kargo, the vars stackNamespace and stackName) and that Argo CD applies its manifest",
			in.Namespace, in.Name, q.NotFoundAfter.Format(time.RFC3339))
	case !q.NotFoundAfter.IsZero():
		return r.with(PhasePending, ReasonStackNotFound, "Stack %s/%s does not exist yet (has Argo CD synced it?); the verification fails if it still does not at %s (notFoundAfter)",
			in.Namespace, in.Name, q.NotFoundAfter.Format(time.RFC3339))
	}
	return r.with(PhasePending, ReasonStackNotFound, "Stack %s/%s does not exist yet (has Argo CD synced it?)", in.Namespace, in.Name)
}

// maxStalledReason bounds the Stalled reason quoted (the API allows 1024
// characters; the operator's reasons are short PascalCase words).
const maxStalledReason = 64

// terminalFailure matches engine errors that retrying the same commit cannot
// fix: an update run with expectNoChanges that found changes, and mandatory
// policy violations.
var (
	changesNotExpected = regexp.MustCompile(`(?i)no changes were expected`)
	policyViolation    = regexp.MustCompile(`(?i)policy violation|mandatory polic`)
)

// Verify answers whether the Stack applied (operation up) or previewed
// (operation preview) the requested commit. The rules, in order:
//
//  1. no Stack: Pending (Argo CD may not have synced it yet), or Failed
//     once Query.NotFoundAfter has come (the caller's grace is over);
//  2. a Stack being deleted: Failed;
//  3. a pinned Stack (spec.commit) whose commit is another: Pending;
//     with Query.DenyOn, a Stack that does not require approval, or whose
//     plan of the commit has a denied operation: Failed (denyPlan);
//  4. an update in flight for the current generation at the commit:
//     Running (Failed when it retries, at the backoff cap, an update that
//     already failed RetryStallAfter times);
//  5. a generation not yet processed: Pending;
//  6. a Stack that runs the other operation (spec.preview): Failed;
//  7. a Stack Stalled at its current generation: Failed (but Pending when
//     a branch-tracking Stack is stalled on another commit; ExportFailed
//     when it applied the commit and its outputs were refused);
//  8. a conflict with another run, retried: Running;
//  9. the last update, for the current generation at the commit and of the
//     requested operation: Succeeded (within Query.Within; with
//     spec.exports, once its outputs are exported: Running while they are
//     due, Failed when the operator refused them), Failed
//     (expectNoChanges, policy violations, or RetryStallAfter failures), or
//     Running (retried, with the attempt and when);
//  10. otherwise Pending: the operator has not run the commit yet.
//
// A preview never satisfies an up verification, nor an up a preview one.
func Verify(in Input) Result {
	r := Result{
		Operation:       in.Query.Operation,
		RequestedCommit: &Commit{SHA: in.Query.Commit, Short: revision.Short(in.Query.Commit)},
		Stack:           StackRef{Namespace: in.Namespace, Name: in.Name},
		ObservedAt:      in.Now.UTC(),
	}
	s := in.Stack
	if s == nil {
		return stackNotFound(r, in)
	}
	describeStack(&r, s)
	q := in.Query
	gen := s.Generation
	if s.DeletionTimestamp != nil {
		return r.with(PhaseFailed, ReasonStackDeleting, "Stack %s/%s is being deleted; it will not apply %s", s.Namespace, s.Name, r.RequestedCommit.Short)
	}
	if specCommit(s) != "" && !Matches(specCommit(s), q.Commit) {
		return r.with(PhasePending, ReasonCommitNotTargeted, "the Stack targets commit %s, not %s (has Argo CD synced the change?)", revision.Short(CommitSHA(specCommit(s))), r.RequestedCommit.Short)
	}
	if len(q.DenyOn) > 0 {
		if denied, ok := denyPlan(r, s, q); ok {
			return denied
		}
	}
	op := stackOperation(s)

	if cu := s.Status.CurrentUpdate; cu != nil && cu.Purpose == pulumiv1.UpdatePurposePlan && cu.Generation == gen && Matches(cu.Commit, q.Commit) && op == q.Operation {
		r.ObservedCommit = NewCommit(cu.Commit)
		return r.with(PhasePending, ReasonAwaitingApproval, "the Stack requires approval: %s is being previewed to save a plan for approval", r.ObservedCommit.Short)
	}
	if cu := s.Status.CurrentUpdate; cu != nil && cu.Purpose != pulumiv1.UpdatePurposeDriftCheck && cu.Purpose != pulumiv1.UpdatePurposePlan && cu.Generation == gen && Matches(cu.Commit, q.Commit) && op == q.Operation {
		r.ObservedCommit = NewCommit(cu.Commit)
		r.Update = describeUpdate(in.Update(cu.Name), cu.Name, string(op))
		attempt := int64(1)
		if lu := s.Status.LastUpdate; lu != nil && lu.State == pulumiv1.FailedStackStateMessage && lu.Generation == gen && Matches(lu.LastAttemptedCommit, q.Commit) {
			attempt = lu.Failures + 1
			if lu.Failures >= pulumiv1.RetryStallAfter {
				// Past the stall threshold the operator still retries, at
				// the backoff cap, in case an outage heals; the verdict on
				// this commit stands.
				r.StalledReason = pulumiv1.StalledUpdateFailedReason
				return r.with(PhaseFailed, ReasonStackStalled, "%s of %s failed %d times in a row, so the Stack is stalled; a retry at the backoff cap is running", op, r.ObservedCommit.Short, lu.Failures)
			}
		}
		if attempt > 1 {
			return r.with(PhaseRunning, ReasonUpdateInProgress, "%s of %s is running (attempt %d, after %d failures)", op, r.ObservedCommit.Short, attempt, attempt-1)
		}
		return r.with(PhaseRunning, ReasonUpdateInProgress, "%s of %s is running", op, r.ObservedCommit.Short)
	}

	// The operator sets observedGeneration once the Stack is Ready or
	// Stalled; a failed update that is retried, or a conflict, for the
	// current generation shows it processed the generation too.
	lu := s.Status.LastUpdate
	processed := s.Status.ObservedGeneration >= gen || lu != nil && lu.Generation == gen ||
		s.Status.Conflict != nil && s.Status.Conflict.Generation == gen
	if !processed {
		return r.with(PhasePending, ReasonGenerationNotObserved, "the operator has not processed generation %d of the Stack yet (observed: %d)", gen, s.Status.ObservedGeneration)
	}
	if op != q.Operation {
		if op == OperationPreview {
			return r.with(PhaseFailed, ReasonOperationMismatch, "the Stack runs previews only (spec.preview: true): it never applies %s; verify with operation=preview, or set spec.preview to false", r.RequestedCommit.Short)
		}
		return r.with(PhaseFailed, ReasonOperationMismatch, "the Stack applies its program (spec.preview is not set): it runs no preview of %s; verify with operation=up, or set spec.preview: true", r.RequestedCommit.Short)
	}

	luAtCommit := lu != nil && lu.Generation == gen && Matches(lu.LastAttemptedCommit, q.Commit) && Operation(lu.Type) == q.Operation
	if lu != nil {
		r.ObservedCommit = NewCommit(lu.LastAttemptedCommit)
	}

	if st := conditions.Current(s, s.Status.Conditions, pulumiv1.StalledCondition); st != nil && st.Status == metav1.ConditionTrue {
		onAnotherCommit := st.Reason == pulumiv1.StalledUpdateFailedReason || st.Reason == pulumiv1.StalledExportFailedReason
		if onAnotherCommit && !luAtCommit && specCommit(s) == "" {
			return r.with(PhasePending, ReasonAwaitingUpdate, "the Stack tracks %s and is stalled on another commit (%s); it has not run %s", branchOf(s), shortOf(r.ObservedCommit), r.RequestedCommit.Short)
		}
		if luAtCommit {
			r.Update = describeLastUpdate(in.Update(lu.Name), lu)
		}
		if st.Reason == pulumiv1.StalledExportFailedReason && luAtCommit {
			// The commit was applied; its outputs were refused: the
			// export's reason says more than the stall.
			var done bool
			if r, done = exportsVerdict(r, s, op); done {
				return r
			}
			r.Exports = nil
		}
		// The Stalled message may quote the engine or git (an update's
		// error output): only a masked, bounded excerpt is passed on.
		r.StalledReason = cut(st.Reason, maxStalledReason)
		if st.Reason == pulumiv1.StalledPlanRejectedReason {
			r.Plan = describePlan(s.Status.Plan)
		}
		return r.with(PhaseFailed, ReasonStackStalled, "the Stack is stalled (%s): %s", r.StalledReason, Detail(st.Message))
	}
	if p := s.Status.Plan; p != nil && p.Generation == gen && Matches(p.Commit, q.Commit) && !luAtCommit &&
		(p.State == pulumiv1.PlanAwaitingApproval || p.State == pulumiv1.PlanPreviewFailed) {
		r.Plan = describePlan(p)
		if p.State == pulumiv1.PlanPreviewFailed {
			return r.with(PhasePending, ReasonAwaitingApproval, "the Stack requires approval; the preview of %s could not make a plan (attempt %d): %s", r.RequestedCommit.Short, p.Failures, Detail(p.Message))
		}
		return r.with(PhasePending, ReasonAwaitingApproval, "awaiting approval: %s, plan %s (expires %s)", p.Summary, p.ShortFingerprint(), p.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if luAtCommit && lu.State == pulumiv1.FailedStackStateMessage && s.Spec.Approval != nil && s.Spec.Approval.Required {
		// The up of an approved plan failed or found it stale: the
		// operator does not retry it; it previews again for a new approval.
		r.Update = describeLastUpdate(in.Update(lu.Name), lu)
		r.Plan = describePlan(s.Status.Plan)
		return r.with(PhaseFailed, ReasonPlanNotApplied, "the approved plan of %s was not applied (%s); the change is previewed again and needs a new approval", r.ObservedCommit.Short, Detail(lu.Message))
	}

	if c := s.Status.Conflict; c != nil && c.Generation == gen && Matches(c.Revision, q.Commit) {
		r.ObservedCommit = NewCommit(c.Revision)
		r.Update = describeUpdate(in.Update(c.Update), c.Update, string(op))
		return r.with(PhaseRunning, ReasonRetryingAfterConflict, "%s of %s met another update's lock (%d in a row); the operator retries it", op, r.ObservedCommit.Short, c.Count)
	}

	if luAtCommit {
		r.Update = describeLastUpdate(in.Update(lu.Name), lu)
		if lu.State == pulumiv1.SucceededStackStateMessage {
			var done bool
			if r, done = exportsVerdict(r, s, op); done {
				return r
			}
			if w := q.Within; w > 0 && in.Now.Sub(lu.LastResyncTime.Time) > w {
				return r.with(PhasePending, ReasonSucceededOutsideWindow, "%s of %s succeeded at %s, longer ago than %s", op, r.ObservedCommit.Short, lu.LastResyncTime.UTC().Format(time.RFC3339), w)
			}
			return r.with(PhaseSucceeded, ReasonUpdateSucceeded, "%s of %s succeeded", op, r.ObservedCommit.Short)
		}
		switch {
		case changesNotExpected.MatchString(lu.Message):
			return r.with(PhaseFailed, ReasonChangesNotExpected, "%s of %s ran with expectNoChanges and found changes", op, r.ObservedCommit.Short)
		case policyViolation.MatchString(lu.Message):
			return r.with(PhaseFailed, ReasonPolicyViolation, "%s of %s violated a mandatory policy", op, r.ObservedCommit.Short)
		}
		if lu.Failures >= pulumiv1.RetryStallAfter {
			r.StalledReason = pulumiv1.StalledUpdateFailedReason
			return r.with(PhaseFailed, ReasonStackStalled, "%s of %s failed %d times in a row, so the Stack is stalled", op, r.ObservedCommit.Short, lu.Failures)
		}
		next, _ := s.NextRetryTime()
		next = next.UTC()
		r.Retry = &Retry{Attempt: lu.Failures, StallsAfter: pulumiv1.RetryStallAfter, NextTime: &next}
		return r.with(PhaseRunning, ReasonRetryingAfterFailure, "%s of %s failed (attempt %d of %d before the Stack stalls); the operator retries it at %s", op, r.ObservedCommit.Short, lu.Failures, pulumiv1.RetryStallAfter, next.Format(time.RFC3339))
	}

	if specCommit(s) == "" {
		return r.with(PhasePending, ReasonAwaitingUpdate, "the Stack tracks %s; its last update ran %s, not %s", branchOf(s), shortOf(r.ObservedCommit), r.RequestedCommit.Short)
	}
	return r.with(PhasePending, ReasonAwaitingUpdate, "the operator has not run %s of %s for generation %d yet", op, r.RequestedCommit.Short, gen)
}

// Summary is the current state of a Stack, as the verification of the commit
// it last ran (or runs now) would see it.
func Summary(in Input) Result {
	s := in.Stack
	in.Query.Operation = OperationUp
	if s != nil {
		in.Query.Operation = stackOperation(s)
		rev := specCommit(s)
		if cu := s.Status.CurrentUpdate; cu != nil && cu.Purpose != pulumiv1.UpdatePurposeDriftCheck {
			rev = cu.Commit
		} else if lu := s.Status.LastUpdate; rev == "" && lu != nil {
			rev = lu.LastAttemptedCommit
		}
		in.Query.Commit = CommitSHA(rev)
	}
	if in.Query.Commit == "" || !IsCommit(in.Query.Commit) {
		r := Verify(Input{Namespace: in.Namespace, Name: in.Name, Stack: nil, Now: in.Now, Update: in.Update})
		r.RequestedCommit = nil
		if s != nil {
			describeStack(&r, s)
			return r.with(PhasePending, ReasonAwaitingUpdate, "the Stack has not run an update yet")
		}
		return r
	}
	r := Verify(in)
	r.RequestedCommit = nil
	return r
}

func (r Result) with(p Phase, reason, format string, args ...any) Result {
	r.Phase, r.Reason, r.Message = p, reason, fmt.Sprintf(format, args...)
	return r
}

func stackOperation(s *pulumiv1.Stack) Operation {
	if s.Spec.Preview {
		return OperationPreview
	}
	return OperationUp
}

func describeStack(r *Result, s *pulumiv1.Stack) {
	r.Stack.Generation = s.Generation
	r.Stack.ObservedGeneration = s.Status.ObservedGeneration
	r.Stack.Branch = specBranch(s)
	r.Stack.TargetCommit = NewCommit(specCommit(s))
	if lu := s.Status.LastUpdate; lu != nil {
		r.Stack.LastSuccessfulCommit = NewCommit(lu.LastSuccessfulCommit)
		r.Stack.LastAttemptedCommit = NewCommit(lu.LastAttemptedCommit)
	}
}

// describeUpdate describes an Update object; fallbackType is used while it
// is not in the cache yet.
func describeUpdate(u *autov1alpha1.Update, name, fallbackType string) *Update {
	if u == nil {
		return &Update{Name: name, Type: fallbackType, State: UpdateStatePending}
	}
	d := &Update{Name: u.Name, Type: string(u.Spec.Type), State: updateState(u), Permalink: u.Status.Permalink, Changes: NewChanges(u.Status.Changes)}
	d.StartTime = timePtr(u.Status.StartTime)
	d.EndTime = timePtr(u.Status.EndTime)
	return d
}

// describeLastUpdate describes the Stack's last update from its Update
// object, or from the Stack's record when the object is gone.
func describeLastUpdate(u *autov1alpha1.Update, lu *pulumiv1.StackUpdateState) *Update {
	if u != nil {
		return describeUpdate(u, lu.Name, string(lu.Type))
	}
	return &Update{Name: lu.Name, Type: string(lu.Type), State: string(lu.State), Permalink: string(lu.Permalink), EndTime: timePtr(lu.LastResyncTime)}
}

func updateState(u *autov1alpha1.Update) string {
	if c := apimeta.FindStatusCondition(u.Status.Conditions, autov1alpha1.UpdateConditionTypeComplete); c != nil && c.Status == metav1.ConditionTrue {
		if f := apimeta.FindStatusCondition(u.Status.Conditions, autov1alpha1.UpdateConditionTypeFailed); f != nil && f.Status == metav1.ConditionTrue {
			return UpdateStateFailed
		}
		return UpdateStateSucceeded
	}
	if c := apimeta.FindStatusCondition(u.Status.Conditions, autov1alpha1.UpdateConditionTypeProgressing); c != nil && c.Status == metav1.ConditionTrue {
		return UpdateStateRunning
	}
	return UpdateStatePending
}

func timePtr(t metav1.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func branchOf(s *pulumiv1.Stack) string {
	if specBranch(s) != "" {
		return "branch " + specBranch(s)
	}
	return "its source"
}

func shortOf(c *Commit) string {
	if c == nil {
		return "nothing"
	}
	return c.Short
}

// specCommit is the commit a Git-sourced Stack pins ("" for a branch, a
// Flux source or a Program).
func specCommit(s *pulumiv1.Stack) string {
	if s.Spec.GitSource == nil {
		return ""
	}
	return s.Spec.GitSource.Commit
}

func specBranch(s *pulumiv1.Stack) string {
	if s.Spec.GitSource == nil {
		return ""
	}
	return s.Spec.GitSource.Branch
}

// describePlan describes a Stack's plan for a result.
// denyPlan applies Query.DenyOn: a Stack that does not require approval
// cannot have a change refused before it applies (Failed,
// ApprovalNotRequired); the plan of the requested commit, at the Stack's
// generation, that has a denied operation fails the verification (Failed,
// PlanDenied), saying whether it still awaits approval (nothing applied) or
// was approved already. ok is false when neither holds (the plan is not
// made yet, or has no denied operation).
func denyPlan(r Result, s *pulumiv1.Stack, q Query) (Result, bool) {
	deny := strings.Join(q.DenyOn, ",")
	if s.Spec.Approval == nil || !s.Spec.Approval.Required {
		return r.with(PhaseFailed, ReasonApprovalNotRequired, "denyOn=%s needs a Stack that requires approval (spec.approval.required: true): this one applies %s as soon as it is pinned, with no plan to check first",
			deny, r.RequestedCommit.Short), true
	}
	p := s.Status.Plan
	if p == nil || p.Generation != s.Generation || !Matches(p.Commit, q.Commit) {
		return r, false
	}
	var found []string
	for _, op := range q.DenyOn {
		n := p.Changes[op]
		if op == "delete" {
			n += p.Changes["replace"]
		}
		if n > 0 {
			found = append(found, fmt.Sprintf("%d to %s", n, op))
		}
	}
	if len(found) == 0 {
		return r, false
	}
	r.ObservedCommit = NewCommit(p.Commit)
	r.Plan = describePlan(p)
	what := "nothing of it was applied: the Stack awaits approval of it until " + p.ExpiresAt.UTC().Format(time.RFC3339) + " (reject it, or push a change without it)"
	switch p.State {
	case pulumiv1.PlanApplying, pulumiv1.PlanApplied:
		what = "it was approved already (" + approverOf(p) + ") and is applied anyway"
	case pulumiv1.PlanRejected:
		what = "it was rejected; nothing of it was applied"
	}
	return r.with(PhaseFailed, ReasonPlanDenied, "the plan of %s (%s, plan %s) has resources %s, which denyOn=%s refuses; %s",
		r.ObservedCommit.Short, p.Summary, p.ShortFingerprint(), strings.Join(found, ", "), deny, what), true
}

func approverOf(p *pulumiv1.StackPlan) string {
	if p.Approval == nil {
		return "by an approval"
	}
	return "by " + p.Approval.Approver
}

func describePlan(p *pulumiv1.StackPlan) *Plan {
	if p == nil {
		return nil
	}
	d := &Plan{Fingerprint: p.Fingerprint, State: string(p.State), Summary: p.Summary, Changes: p.Changes}
	d.ExpiresAt = timePtr(p.ExpiresAt)
	return d
}
