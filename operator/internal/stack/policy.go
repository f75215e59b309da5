package stack

import (
	"fmt"
	"time"

	"github.com/stackflow-io/stackflow/internal/revision"
	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// Policy defaults.
const (
	// DefaultResync is how often a tracked branch is re-resolved.
	DefaultResync = 60 * time.Second
	// FirstRetry is the delay before the first retry of a failed update.
	FirstRetry = pulumiv1.RetryFirstDelay
	// DefaultMaxBackoff caps the retry backoff when the spec does not.
	DefaultMaxBackoff = pulumiv1.RetryDefaultMaxBackoff
	// MaxFailures is how many consecutive failed updates show a Stack as
	// Stalled; it is still retried at the backoff cap.
	MaxFailures = pulumiv1.RetryStallAfter
	// MaxConflictBackoff caps the wait before retrying an update that met
	// another run's lock (retryOnUpdateConflict).
	MaxConflictBackoff = 5 * time.Minute
	// DefaultDriftInterval is the time between drift checks when the spec
	// does not say.
	DefaultDriftInterval = 5 * time.Minute
)

// Input is what a decision looks at.
type Input struct {
	Stack *pulumiv1.Stack
	// Revision is the program revision the source resolves to now (commit
	// SHA, or artifact revision).
	Revision string
	// InputsDigest is the keyed digest of the referenced ConfigMap and Secret
	// values read now (InputsDigest); empty when the Stack refers to none.
	InputsDigest string
	// Now is the clock.
	Now time.Time
	// ResyncOverride, when set, replaces the resync and drift-check intervals
	// (tests and local demos only).
	ResyncOverride time.Duration
}

// Action is what the Stack controller should do.
type Action int

const (
	// UpToDate: nothing to run; look again after RequeueAfter (0: only on
	// change).
	UpToDate Action = iota
	// Run: start an update of UpdateType for Purpose.
	Run
	// Retry: the last update failed or met a lock; run again after
	// RequeueAfter. Condition is the Reconciling reason.
	Retry
	// Stall: do not run until something changes; Condition is the Stalled
	// reason. RequeueAfter, when set, is when to look again (the source is
	// still watched, and a failing update is still retried at the backoff
	// cap).
	Stall
)

// Decision is a policy's verdict with its reason, for status and logs.
type Decision struct {
	Action     Action
	UpdateType autov1alpha1.UpdateType
	// Purpose says why an update runs (Run).
	Purpose pulumiv1.UpdatePurpose
	// Refresh forces a refresh before the update (drift checks and
	// remediation), whatever spec.refresh says.
	Refresh bool
	// Condition is the Reconciling reason (Retry) or Stalled reason (Stall).
	Condition    string
	Reason       string
	RequeueAfter time.Duration
}

// check is one rule: it returns a decision, or ok=false to defer to the next.
type check func(in Input) (Decision, bool)

// Decide runs the rules in order; the first that applies wins. Every fact it
// uses is in the Stack (spec and status) or the Input, so an operator that
// restarts, or a new leader, decides the same.
func Decide(in Input) Decision {
	for _, c := range []check{conflicted, neverRan, specChanged, requested, revisionChanged, inputsChanged, lastFailed, remediationPending, resyncDue, driftCheckDue} {
		if d, ok := c(in); ok {
			if d.UpdateType == "" {
				d.UpdateType = updateType(in.Stack)
			}
			if d.Purpose == "" && d.Action == Run {
				d.Purpose = pulumiv1.UpdatePurposeDeploy
			}
			return d
		}
	}
	return Decision{Action: UpToDate, UpdateType: updateType(in.Stack), Reason: "up to date", RequeueAfter: nextLook(in)}
}

func updateType(s *pulumiv1.Stack) autov1alpha1.UpdateType {
	if s.Spec.Preview {
		return autov1alpha1.PreviewType
	}
	return autov1alpha1.UpType
}

// conflicted: the last update met a lock held by another run, for what the
// Stack wants now. With retryOnUpdateConflict it is retried with backoff
// (without counting as a failure); without, the Stack stalls until its spec,
// revision, inputs or reconcile request change — and keeps watching its
// source meanwhile.
func conflicted(in Input) (Decision, bool) {
	c := in.Stack.Status.Conflict
	if c == nil || !conflictCurrent(in) {
		return Decision{}, false
	}
	if !in.Stack.Spec.RetryOnUpdateConflict {
		return Decision{Action: Stall, Condition: pulumiv1.StalledConflictReason, RequeueAfter: resyncInterval(in),
			Reason: fmt.Sprintf("another update holds the stack (%s): %s; set spec.retryOnUpdateConflict to retry automatically, or request a reconciliation (annotation %s)", c.Update, c.Message, pulumiv1.ReconcileRequestAnnotation)}, true
	}
	wait := Backoff(c.Count, min(maxBackoff(in.Stack), MaxConflictBackoff))
	if due := c.Time.Add(wait); in.Now.Before(due) {
		return Decision{Action: Retry, Condition: pulumiv1.ReconcilingConflictRetryReason, RequeueAfter: due.Sub(in.Now),
			Reason: fmt.Sprintf("another update holds the stack (conflict %d, %s); retrying in %s", c.Count, c.Update, due.Sub(in.Now).Round(time.Second))}, true
	}
	return Decision{Action: Run, Reason: fmt.Sprintf("retrying after conflict %d", c.Count)}, true
}

// conflictCurrent: the recorded conflict is about what the Stack wants now.
func conflictCurrent(in Input) bool {
	c := in.Stack.Status.Conflict
	return c.Generation == in.Stack.Generation && c.Revision == in.Revision &&
		c.InputsDigest == in.InputsDigest && c.ReconcileRequest == in.Stack.Annotations[pulumiv1.ReconcileRequestAnnotation]
}

func neverRan(in Input) (Decision, bool) {
	if in.Stack.Status.LastUpdate == nil {
		return Decision{Action: Run, Reason: "the stack has not been updated yet"}, true
	}
	return Decision{}, false
}

// specChanged: a new generation (spec change, including turning preview off)
// runs at once, even after failures.
func specChanged(in Input) (Decision, bool) {
	lu := in.Stack.Status.LastUpdate
	if lu.Generation != in.Stack.Generation {
		return Decision{Action: Run, Reason: fmt.Sprintf("the spec changed (generation %d, last update ran for %d)", in.Stack.Generation, lu.Generation)}, true
	}
	if lu.Type != updateType(in.Stack) && lu.Type != autov1alpha1.DestroyType {
		return Decision{Action: Run, Reason: fmt.Sprintf("the last update was a %s; this stack runs %s", lu.Type, updateType(in.Stack))}, true
	}
	return Decision{}, false
}

// requested: a new pulumi.com/reconciliation-request value runs at once.
func requested(in Input) (Decision, bool) {
	req := in.Stack.Annotations[pulumiv1.ReconcileRequestAnnotation]
	if req != "" && req != in.Stack.Status.LastUpdate.ReconcileRequest {
		return Decision{Action: Run, Reason: fmt.Sprintf("reconciliation requested (%s)", req)}, true
	}
	return Decision{}, false
}

// revisionChanged: a new commit runs; a commit whose update failed is retried
// by lastFailed instead.
func revisionChanged(in Input) (Decision, bool) {
	lu := in.Stack.Status.LastUpdate
	if in.Revision == "" || in.Revision == lu.LastAttemptedCommit {
		return Decision{}, false
	}
	if lu.State == pulumiv1.SucceededStackStateMessage && in.Revision == lu.LastSuccessfulCommit {
		return Decision{}, false
	}
	return Decision{Action: Run, Reason: fmt.Sprintf("new revision %s", revision.Short(in.Revision))}, true
}

// inputsChanged: a value in a referenced ConfigMap or Secret changed since the
// last update: inputs are desired state, so it runs once per distinct digest.
// A record without a digest (written before digests existed) is taken as
// current.
func inputsChanged(in Input) (Decision, bool) {
	lu := in.Stack.Status.LastUpdate
	if lu.InputsDigest == "" || in.InputsDigest == lu.InputsDigest {
		return Decision{}, false
	}
	return Decision{Action: Run, Reason: "a referenced ConfigMap or Secret changed"}, true
}

// lastFailed retries a failed update with exponential backoff (10 s, 20 s, …,
// capped by retryMaxBackoffDurationSeconds). After MaxFailures the Stack shows
// Stalled, but the update is still retried at the backoff cap, so an outage
// outside the Stack's control heals by itself.
func lastFailed(in Input) (Decision, bool) {
	lu := in.Stack.Status.LastUpdate
	if lu.State != pulumiv1.FailedStackStateMessage {
		return Decision{}, false
	}
	if lu.Failures >= MaxFailures {
		due := lu.LastResyncTime.Add(maxBackoff(in.Stack))
		if !in.Now.Before(due) {
			return Decision{Action: Run, Reason: fmt.Sprintf("retrying after %d failures (at the backoff cap)", lu.Failures)}, true
		}
		return Decision{Action: Stall, Condition: pulumiv1.StalledUpdateFailedReason, RequeueAfter: minPositive(due.Sub(in.Now), resyncInterval(in)),
			Reason: fmt.Sprintf("the update failed %d times in a row: %s; fix the program or its configuration, push a new commit, or request a reconciliation (retrying anyway in %s)", lu.Failures, lu.Message, due.Sub(in.Now).Round(time.Second))}, true
	}
	wait := Backoff(lu.Failures, maxBackoff(in.Stack))
	if due := lu.LastResyncTime.Add(wait); in.Now.Before(due) {
		return Decision{Action: Retry, Condition: pulumiv1.ReconcilingRetryReason, Reason: fmt.Sprintf("the update failed (attempt %d of %d): %s; retrying in %s", lu.Failures, MaxFailures, lu.Message, due.Sub(in.Now).Round(time.Second)), RequeueAfter: due.Sub(in.Now)}, true
	}
	return Decision{Action: Run, Reason: fmt.Sprintf("retrying after failure %d of %d", lu.Failures, MaxFailures)}, true
}

// remediationPending: a drift check found drift and remediate is on: an up
// with refresh puts the infrastructure back.
func remediationPending(in Input) (Decision, bool) {
	s := in.Stack
	dc := s.Status.DriftCheck
	if dc == nil || !dc.RemediationPending || s.Spec.Preview || s.Spec.DriftDetection == nil || !s.Spec.DriftDetection.Remediate {
		return Decision{}, false
	}
	return Decision{Action: Run, UpdateType: autov1alpha1.UpType, Purpose: pulumiv1.UpdatePurposeRemediate, Refresh: true, Reason: "remediating drift"}, true
}

// resyncDue re-runs an unchanged stack every resync interval when
// continueResyncOnCommitMatch asks for it.
func resyncDue(in Input) (Decision, bool) {
	if !in.Stack.Spec.ContinueResyncOnCommitMatch {
		return Decision{}, false
	}
	due := in.Stack.Status.LastUpdate.LastResyncTime.Add(resyncInterval(in))
	if !in.Now.Before(due) {
		return Decision{Action: Run, Reason: "periodic resync (continueResyncOnCommitMatch)"}, true
	}
	return Decision{}, false
}

// driftCheckDue starts a drift check (a preview with refresh of the deployed
// revision, changing nothing) every driftDetection interval after the last
// successful up or check.
func driftCheckDue(in Input) (Decision, bool) {
	due, ok := driftDue(in)
	if !ok || in.Now.Before(due) {
		return Decision{}, false
	}
	return Decision{Action: Run, UpdateType: autov1alpha1.PreviewType, Purpose: pulumiv1.UpdatePurposeDriftCheck, Refresh: true, Reason: "drift check"}, true
}

// driftDue is when the next drift check is due, if the Stack checks drift.
func driftDue(in Input) (time.Time, bool) {
	s := in.Stack
	lu := s.Status.LastUpdate
	if s.Spec.DriftDetection == nil || s.Spec.Preview || lu == nil || lu.Type != autov1alpha1.UpType || lu.State != pulumiv1.SucceededStackStateMessage {
		return time.Time{}, false
	}
	interval := DefaultDriftInterval
	if s.Spec.DriftDetection.IntervalSeconds > 0 {
		interval = time.Duration(s.Spec.DriftDetection.IntervalSeconds) * time.Second
	}
	if in.ResyncOverride > 0 {
		interval = in.ResyncOverride
	}
	last := lu.LastResyncTime.Time
	if dc := s.Status.DriftCheck; dc != nil && dc.LastCheckTime.After(last) {
		last = dc.LastCheckTime.Time
	}
	return last.Add(interval), true
}

// nextLook is when an up-to-date Stack looks again: the next resync of a
// tracked branch, periodic resync, or drift check (0: only on change).
func nextLook(in Input) time.Duration {
	d := resyncInterval(in)
	if in.Stack.Spec.ContinueResyncOnCommitMatch && in.Stack.Status.LastUpdate != nil {
		d = minPositive(d, in.Stack.Status.LastUpdate.LastResyncTime.Add(resyncInterval(in)).Sub(in.Now))
	}
	if due, ok := driftDue(in); ok {
		d = minPositive(d, max(due.Sub(in.Now), time.Second))
	}
	return d
}

// minPositive is the smaller of two durations, ignoring zeros (which mean
// "never").
func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

// Failures is the consecutive-failure count after an update for (generation,
// revision, inputs) failed: one more than the last record's when it failed
// for the same things, else 1.
func Failures(prev *pulumiv1.StackUpdateState, generation int64, revision, inputs string) int64 {
	if prev != nil && prev.State == pulumiv1.FailedStackStateMessage && prev.Generation == generation &&
		prev.LastAttemptedCommit == revision && prev.InputsDigest == inputs {
		return prev.Failures + 1
	}
	return 1
}

// ConflictCount is the number of conflicts in a row after an update for
// (generation, revision, inputs, request) met a lock.
func ConflictCount(prev *pulumiv1.StackConflict, generation int64, revision, inputs, request string) int64 {
	if prev != nil && prev.Generation == generation && prev.Revision == revision && prev.InputsDigest == inputs && prev.ReconcileRequest == request {
		return prev.Count + 1
	}
	return 1
}

// Backoff is the delay before retry number failures: FirstRetry doubled per
// failure after the first, capped at max.
// The schedule is the API's (pulumiv1.RetryBackoff), which the analysis
// service reads too.
func Backoff(failures int64, max time.Duration) time.Duration {
	return pulumiv1.RetryBackoff(failures, max)
}

func maxBackoff(s *pulumiv1.Stack) time.Duration { return s.RetryMaxBackoff() }

// resyncInterval is how often the source is re-resolved (0: never, for a
// pinned commit without continueResyncOnCommitMatch).
func resyncInterval(in Input) time.Duration {
	s := in.Stack
	d := specResync(s)
	if in.ResyncOverride > 0 && d > 0 {
		return in.ResyncOverride
	}
	return d
}

func specResync(s *pulumiv1.Stack) time.Duration {
	if s.Spec.ResyncFrequencySeconds > 0 {
		return time.Duration(s.Spec.ResyncFrequencySeconds) * time.Second
	}
	if s.Spec.GitSource != nil && s.Spec.Branch != "" || s.Spec.ContinueResyncOnCommitMatch {
		return DefaultResync
	}
	return 0
}

// Prerequisite is what a prerequisite check needs to know of another Stack.
type Prerequisite struct {
	Name string
	// Found is false when the prerequisite Stack does not exist.
	Found bool
	// LastUpdate is its last finished update.
	LastUpdate *pulumiv1.StackUpdateState
	// Within is the requirement's succeededWithinDuration (0: any age).
	Within time.Duration
	// Exports: the prerequisite has spec.exports. Its dependents then
	// also wait while it updates and until its last update is exported, so
	// they read its new outputs, not the ones before.
	Exports bool
	// Updating: an update of the prerequisite is in flight (a drift check
	// aside).
	Updating bool
	// ExportsCurrent: its exports hold its last update's outputs
	// (ExportsCurrent).
	ExportsCurrent bool
}

// PrerequisiteVerdict says whether a prerequisite is satisfied and, when it is
// stale, that it should be asked to re-sync.
type PrerequisiteVerdict struct {
	Satisfied bool
	// Resync: the prerequisite succeeded too long ago; ask it to run again.
	Resync  bool
	Message string
}

// CheckPrerequisite: the prerequisite's last update was a successful up,
// recent enough and, when it exports outputs, exported and not followed by
// another update in flight.
func CheckPrerequisite(p Prerequisite, now time.Time) PrerequisiteVerdict {
	switch {
	case !p.Found:
		return PrerequisiteVerdict{Message: fmt.Sprintf("prerequisite %s not found", p.Name)}
	case p.LastUpdate == nil:
		return PrerequisiteVerdict{Message: fmt.Sprintf("prerequisite %s has not been updated yet", p.Name)}
	case p.LastUpdate.Type != autov1alpha1.UpType:
		return PrerequisiteVerdict{Message: fmt.Sprintf("prerequisite %s last ran a %s, not an up", p.Name, p.LastUpdate.Type)}
	case p.LastUpdate.State != pulumiv1.SucceededStackStateMessage:
		return PrerequisiteVerdict{Message: fmt.Sprintf("prerequisite %s's last update failed", p.Name)}
	case p.Exports && p.Updating:
		return PrerequisiteVerdict{Message: fmt.Sprintf("prerequisite %s is updating; its exports follow", p.Name)}
	case p.Exports && !p.ExportsCurrent:
		return PrerequisiteVerdict{Message: fmt.Sprintf("prerequisite %s has not exported its last update's outputs (see its status.exports)", p.Name)}
	}
	if p.Within > 0 {
		age := now.Sub(p.LastUpdate.LastResyncTime.Time)
		if age > p.Within {
			return PrerequisiteVerdict{Resync: true, Message: fmt.Sprintf("prerequisite %s last succeeded %s ago, more than the required %s; asked it to re-sync", p.Name, age.Round(time.Second), p.Within)}
		}
	}
	return PrerequisiteVerdict{Satisfied: true}
}

// IdleReclaim says whether an up-to-date Stack's Workspace has been idle
// long enough to be removed (spec.workspaceIdleTimeoutSeconds, else
// operatorDefault; 0 is off), and otherwise in how long it will have been
// (0 when there is nothing to wait for). Idle is since the last update or
// drift check ended; a Stack that never ran, or has an update in flight,
// is never idle.
func IdleReclaim(s *pulumiv1.Stack, operatorDefault time.Duration, now time.Time) (reclaim bool, after time.Duration) {
	timeout := operatorDefault
	if s.Spec.WorkspaceIdleTimeoutSeconds > 0 {
		timeout = time.Duration(s.Spec.WorkspaceIdleTimeoutSeconds) * time.Second
	}
	lu := s.Status.LastUpdate
	if timeout <= 0 || lu == nil || s.Status.CurrentUpdate != nil || s.Spec.WorkspaceReclaimPolicy == pulumiv1.WorkspaceReclaimDelete {
		return false, 0
	}
	since := lu.LastResyncTime.Time
	if dc := s.Status.DriftCheck; dc != nil && dc.LastCheckTime.After(since) {
		since = dc.LastCheckTime.Time
	}
	if idle := now.Sub(since); idle < timeout {
		return false, timeout - idle
	}
	return true, 0
}
