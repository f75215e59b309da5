package stack

import (
	"fmt"
	"time"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// Policy defaults.
const (
	// DefaultResync is how often a tracked branch is re-resolved.
	DefaultResync = 60 * time.Second
	// FirstRetry is the delay before the first retry of a failed update.
	FirstRetry = 10 * time.Second
	// DefaultMaxBackoff caps the retry backoff when the spec does not.
	DefaultMaxBackoff = time.Hour
	// MaxFailures is how many consecutive failed updates stall a Stack until
	// its spec or source changes.
	MaxFailures = 5
)

// Input is what a decision looks at.
type Input struct {
	Stack *pulumiv1.Stack
	// Revision is the program revision the source resolves to now (commit
	// SHA, or artifact revision).
	Revision string
	// Now is the clock.
	Now time.Time
}

// Action is what the Stack controller should do.
type Action int

const (
	// UpToDate: nothing to run; look again after RequeueAfter (0: only on
	// change).
	UpToDate Action = iota
	// Run: start an update of UpdateType.
	Run
	// Retry: the last update failed; run again after RequeueAfter.
	Retry
	// Stall: stop retrying until the spec or source changes.
	Stall
)

// Decision is a policy's verdict with its reason, for status and logs.
type Decision struct {
	Action       Action
	UpdateType   autov1alpha1.UpdateType
	Reason       string
	RequeueAfter time.Duration
}

// check is one rule: it returns a decision, or ok=false to defer to the next.
type check func(in Input) (Decision, bool)

// Decide runs the rules in order; the first that applies wins.
func Decide(in Input) Decision {
	for _, c := range []check{neverRan, specChanged, requested, revisionChanged, lastFailed, resyncDue} {
		if d, ok := c(in); ok {
			d.UpdateType = updateType(in.Stack)
			return d
		}
	}
	return Decision{Action: UpToDate, UpdateType: updateType(in.Stack), Reason: "up to date", RequeueAfter: resyncInterval(in.Stack)}
}

func updateType(s *pulumiv1.Stack) autov1alpha1.UpdateType {
	if s.Spec.Preview {
		return autov1alpha1.PreviewType
	}
	return autov1alpha1.UpType
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
	return Decision{Action: Run, Reason: fmt.Sprintf("new revision %s", short(in.Revision))}, true
}

// lastFailed retries a failed update with exponential backoff (10 s, 20 s, …,
// capped by retryMaxBackoffDurationSeconds) and stalls after MaxFailures.
func lastFailed(in Input) (Decision, bool) {
	lu := in.Stack.Status.LastUpdate
	if lu.State != pulumiv1.FailedStackStateMessage {
		return Decision{}, false
	}
	if lu.Failures >= MaxFailures {
		return Decision{Action: Stall, Reason: fmt.Sprintf("the update failed %d times in a row: %s; fix the program or its configuration, push a new commit, or request a reconciliation", lu.Failures, lu.Message)}, true
	}
	wait := Backoff(lu.Failures, maxBackoff(in.Stack))
	if due := lu.LastResyncTime.Add(wait); in.Now.Before(due) {
		return Decision{Action: Retry, Reason: fmt.Sprintf("the update failed (attempt %d of %d): %s; retrying in %s", lu.Failures, MaxFailures, lu.Message, due.Sub(in.Now).Round(time.Second)), RequeueAfter: due.Sub(in.Now)}, true
	}
	return Decision{Action: Run, Reason: fmt.Sprintf("retrying after failure %d of %d", lu.Failures, MaxFailures)}, true
}

// resyncDue re-runs an unchanged stack every resync interval when
// continueResyncOnCommitMatch asks for it.
func resyncDue(in Input) (Decision, bool) {
	if !in.Stack.Spec.ContinueResyncOnCommitMatch {
		return Decision{}, false
	}
	every := resyncInterval(in.Stack)
	due := in.Stack.Status.LastUpdate.LastResyncTime.Add(every)
	if !in.Now.Before(due) {
		return Decision{Action: Run, Reason: "periodic resync (continueResyncOnCommitMatch)"}, true
	}
	return Decision{Action: UpToDate, Reason: "up to date", RequeueAfter: due.Sub(in.Now)}, true
}

// Backoff is the delay before retry number failures: FirstRetry doubled per
// failure after the first, capped at max.
func Backoff(failures int64, max time.Duration) time.Duration {
	d := FirstRetry
	for i := int64(1); i < failures && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}

func maxBackoff(s *pulumiv1.Stack) time.Duration {
	if s.Spec.RetryMaxBackoffDurationSeconds > 0 {
		return time.Duration(s.Spec.RetryMaxBackoffDurationSeconds) * time.Second
	}
	return DefaultMaxBackoff
}

// resyncInterval is how often the source is re-resolved (0: never, for a
// pinned commit without continueResyncOnCommitMatch).
func resyncInterval(s *pulumiv1.Stack) time.Duration {
	if s.Spec.ResyncFrequencySeconds > 0 {
		return time.Duration(s.Spec.ResyncFrequencySeconds) * time.Second
	}
	if s.Spec.GitSource != nil && s.Spec.Branch != "" || s.Spec.ContinueResyncOnCommitMatch {
		return DefaultResync
	}
	return 0
}

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
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
}

// PrerequisiteVerdict says whether a prerequisite is satisfied and, when it is
// stale, that it should be asked to re-sync.
type PrerequisiteVerdict struct {
	Satisfied bool
	// Resync: the prerequisite succeeded too long ago; ask it to run again.
	Resync  bool
	Message string
}

// CheckPrerequisite: the prerequisite's last update was a successful up, and
// recent enough.
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
	}
	if p.Within > 0 {
		age := now.Sub(p.LastUpdate.LastResyncTime.Time)
		if age > p.Within {
			return PrerequisiteVerdict{Resync: true, Message: fmt.Sprintf("prerequisite %s last succeeded %s ago, more than the required %s; asked it to re-sync", p.Name, age.Round(time.Second), p.Within)}
		}
	}
	return PrerequisiteVerdict{Satisfied: true}
}
