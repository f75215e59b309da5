package stack

import (
	"fmt"
	"time"

	"github.com/stackflow-io/stackflow/internal/revision"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// DefaultPlanExpiry is how long a plan may be approved when
// spec.approval.expireAfterSeconds does not say.
const DefaultPlanExpiry = 24 * time.Hour

// ApprovalRequired says whether the Stack's changes wait for an approval.
func ApprovalRequired(s *pulumiv1.Stack) bool {
	return s.Spec.Approval != nil && s.Spec.Approval.Required && !s.Spec.Preview
}

// PlanExpiry is how long the Stack's plans may be approved.
func PlanExpiry(s *pulumiv1.Stack) time.Duration {
	if a := s.Spec.Approval; a != nil && a.ExpireAfterSeconds > 0 {
		return time.Duration(a.ExpireAfterSeconds) * time.Second
	}
	return DefaultPlanExpiry
}

// Verdict is one PlanApproval of the Stack, as the gate reads it.
type Verdict struct {
	Name        string
	Fingerprint string
	// Approve is false for a rejection.
	Approve  bool
	Approver string
	// Time is when it was created (set by the API server).
	Time time.Time
}

// Desired is the change a Run decision asks for: what a plan must have
// been previewed for to be applied.
type Desired struct {
	Generation       int64
	ReconcileRequest string
	Revision         string
	InputsDigest     string
	// Purpose is deploy or remediate.
	Purpose pulumiv1.UpdatePurpose
}

// GateAction is what the approval gate lets a Run decision do.
type GateAction int

const (
	// GatePreview: preview the change and save its plan.
	GatePreview GateAction = iota
	// GateAwait: the plan waits for a person; look again at RequeueAfter
	// (its expiry).
	GateAwait
	// GateApply: run the up constrained to the plan Verdict approved.
	GateApply
	// GateRejected: the plan was rejected; nothing runs until the change
	// changes or a later approval.
	GateRejected
	// GateRetry: the last preview of this change could not make a plan;
	// preview again at RequeueAfter (backoff).
	GateRetry
)

// GateDecision is the gate's verdict, with its reason for status.
type GateDecision struct {
	Action       GateAction
	Reason       string
	RequeueAfter time.Duration
	// Verdict is the approval (GateApply) or rejection (GateRejected)
	// that decided.
	Verdict *Verdict
}

// Gate decides, for a Stack requiring approval whose policy says Run for
// desired, whether to preview the change, wait for a person, apply the
// approved plan, or stop at a rejection. It reads only the Stack's
// status.plan, the PlanApprovals naming the Stack and the clock, so a
// restarted operator decides the same.
//
// An approval counts for the pending plan when it names the plan's
// fingerprint and was made after the change was first proposed
// (status.plan.proposedAt) and before the plan expired; the latest such
// PlanApproval decides (a later approval overrides a rejection, and the
// other way round). An approval approves a change, not a commit: a new
// commit whose preview yields the same fingerprint keeps proposedAt, so
// the approval still counts. Once a plan's up has run (applied, stale or
// failed), its approval is spent: the next change is proposed anew.
func Gate(p *pulumiv1.StackPlan, want Desired, verdicts []Verdict, now time.Time) GateDecision {
	switch {
	case p == nil:
		return GateDecision{Action: GatePreview, Reason: "previewing the change to save a plan for approval"}
	case !planFor(p, want):
		return GateDecision{Action: GatePreview, Reason: fmt.Sprintf("previewing the change (%s) to save a plan for approval", describe(want))}
	case p.State == pulumiv1.PlanPreviewFailed:
		due := p.CreatedAt.Add(Backoff(p.Failures, MaxConflictBackoff))
		if now.Before(due) {
			return GateDecision{Action: GateRetry, RequeueAfter: due.Sub(now),
				Reason: fmt.Sprintf("the preview could not make a plan (attempt %d): %s; previewing again in %s", p.Failures, p.Message, due.Sub(now).Round(time.Second))}
		}
		return GateDecision{Action: GatePreview, Reason: fmt.Sprintf("previewing again after %d failed attempt(s) to make a plan", p.Failures)}
	case p.State != pulumiv1.PlanAwaitingApproval && p.State != pulumiv1.PlanRejected && p.State != pulumiv1.PlanApplying:
		// Applying with no Update in flight (the Stack follows one until it
		// records its end): the up could not be started; its approval
		// still counts.
		return GateDecision{Action: GatePreview, Reason: fmt.Sprintf("the last plan is %s; previewing the change again for a new approval", p.State)}
	case !now.Before(p.ExpiresAt.Time):
		return GateDecision{Action: GatePreview, Reason: fmt.Sprintf("plan %s expired at %s unapproved; previewing the change again", ShortFingerprint(p.Fingerprint), p.ExpiresAt.UTC().Format(time.RFC3339))}
	}
	if len(p.Changes) == 0 {
		// Up constrained to an empty plan changes nothing (any operation
		// would leave the plan): there is nothing for a person to approve.
		return GateDecision{Action: GateApply, Reason: fmt.Sprintf("plan %s changes nothing; applying it without approval", ShortFingerprint(p.Fingerprint))}
	}
	var decided *Verdict
	var other *Verdict
	for i := range verdicts {
		v := &verdicts[i]
		if v.Time.Before(p.ProposedAt.Time) || !v.Time.Before(p.ExpiresAt.Time) {
			continue
		}
		if v.Fingerprint != p.Fingerprint {
			if other == nil || v.Time.After(other.Time) {
				other = v
			}
			continue
		}
		if decided == nil || v.Time.After(decided.Time) || v.Time.Equal(decided.Time) && !v.Approve {
			decided = v
		}
	}
	switch {
	case decided != nil && decided.Approve:
		return GateDecision{Action: GateApply, Verdict: decided,
			Reason: fmt.Sprintf("plan %s (%s) approved by %s (PlanApproval %s); applying exactly that plan", ShortFingerprint(p.Fingerprint), p.Summary, decided.Approver, decided.Name)}
	case decided != nil:
		return GateDecision{Action: GateRejected, Verdict: decided, RequeueAfter: p.ExpiresAt.Sub(now),
			Reason: fmt.Sprintf("plan %s (%s) rejected by %s (PlanApproval %s); push a new change, or approve it with a new PlanApproval", ShortFingerprint(p.Fingerprint), p.Summary, decided.Approver, decided.Name)}
	}
	msg := fmt.Sprintf("awaiting approval: %s, plan %s (expires %s)", p.Summary, ShortFingerprint(p.Fingerprint), p.ExpiresAt.UTC().Format(time.RFC3339))
	if other != nil {
		msg += fmt.Sprintf("; PlanApproval %s names plan %s, not the pending plan: it applies nothing", other.Name, ShortFingerprint(other.Fingerprint))
	}
	return GateDecision{Action: GateAwait, Reason: msg, RequeueAfter: p.ExpiresAt.Sub(now)}
}

// planFor: the plan was previewed for the desired change.
func planFor(p *pulumiv1.StackPlan, want Desired) bool {
	return p.Generation == want.Generation && p.ReconcileRequest == want.ReconcileRequest &&
		p.Commit == want.Revision && p.InputsDigest == want.InputsDigest && p.Purpose == want.Purpose
}

func describe(want Desired) string {
	if want.Purpose == pulumiv1.UpdatePurposeRemediate {
		return "drift remediation of " + revision.Short(want.Revision)
	}
	return "revision " + revision.Short(want.Revision)
}

// ShortFingerprint is the first 12 digits of a fingerprint, as messages
// show it (pulumiv1.StackPlan.ShortFingerprint).
func ShortFingerprint(fp string) string {
	return (&pulumiv1.StackPlan{Fingerprint: fp}).ShortFingerprint()
}

// ProposedPlan is a plan a preview just saved, for RecordPlan.
type ProposedPlan struct {
	Fingerprint   string
	Summary       string
	Changes       map[string]int64
	Resources     []string
	MoreResources int64
	Desired       Desired
	Update        string
	SecretName    string
	CreatedAt     time.Time
}

// RecordPlan is the status.plan after a preview saved plan n: the same
// change as a pending (or rejected) plan that has not expired keeps its
// proposal time and expiry, so the decisions made on it still count;
// anything else is a new proposal, approvable for expiry.
func RecordPlan(prev *pulumiv1.StackPlan, n ProposedPlan, expiry time.Duration) *pulumiv1.StackPlan {
	p := &pulumiv1.StackPlan{
		Fingerprint: n.Fingerprint, State: pulumiv1.PlanAwaitingApproval, Summary: n.Summary, Changes: n.Changes,
		Resources: n.Resources, MoreResources: n.MoreResources, Commit: n.Desired.Revision, InputsDigest: n.Desired.InputsDigest,
		Generation: n.Desired.Generation, ReconcileRequest: n.Desired.ReconcileRequest, Purpose: n.Desired.Purpose,
		Update: n.Update, SecretName: n.SecretName,
	}
	p.CreatedAt.Time = n.CreatedAt
	if prev != nil && prev.Fingerprint == n.Fingerprint && n.CreatedAt.Before(prev.ExpiresAt.Time) &&
		(prev.State == pulumiv1.PlanAwaitingApproval || prev.State == pulumiv1.PlanRejected) {
		p.ProposedAt, p.ExpiresAt = prev.ProposedAt, prev.ExpiresAt
		return p
	}
	p.ProposedAt.Time = n.CreatedAt
	p.ExpiresAt.Time = n.CreatedAt.Add(expiry)
	return p
}

// PlanPreviewFailed is the status.plan after a preview of want could not
// make a plan: the count of failures for the same change goes up.
func PlanPreviewFailed(prev *pulumiv1.StackPlan, want Desired, update, message string, at time.Time) *pulumiv1.StackPlan {
	p := &pulumiv1.StackPlan{
		State: pulumiv1.PlanPreviewFailed, Commit: want.Revision, InputsDigest: want.InputsDigest, Generation: want.Generation,
		ReconcileRequest: want.ReconcileRequest, Purpose: want.Purpose, Update: update, Message: message, Failures: 1,
	}
	p.CreatedAt.Time = at
	if prev != nil && prev.State == pulumiv1.PlanPreviewFailed && planFor(prev, want) {
		p.Failures = prev.Failures + 1
	}
	return p
}

// AwaitRequeue is when a Stack waiting on a person (GateAwait,
// GateRejected) looks again: at the plan's expiry, or sooner at its next
// resync, so that a new commit on its branch is previewed meanwhile.
func AwaitRequeue(in Input, untilExpiry time.Duration) time.Duration {
	return minPositive(untilExpiry, resyncInterval(in))
}
