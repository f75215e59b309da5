package verification

import (
	"time"

	"github.com/stackflow-io/stackflow/internal/revision"
)

// Phase is the verdict of a verification.
type Phase string

const (
	// PhasePending: the Stack does not target the commit yet, has not
	// observed its current generation, or does not exist (yet).
	PhasePending Phase = "Pending"
	// PhaseRunning: an update for the commit is in flight, or failed and will
	// be retried, or succeeded and its outputs are not exported yet
	// (spec.exports).
	PhaseRunning Phase = "Running"
	// PhaseSucceeded: the last update of the requested operation at the
	// commit succeeded for the Stack's current generation.
	PhaseSucceeded Phase = "Succeeded"
	// PhaseFailed: the commit's update failed terminally.
	PhaseFailed Phase = "Failed"
)

// Reasons say why a verification has its phase. They are part of the API:
// templates and steps may match on them.
const (
	// Pending
	// ReasonStackNotFound: the Stack does not exist. Pending, or Failed
	// once the caller's Query.NotFoundAfter has come.
	ReasonStackNotFound         = "StackNotFound"
	ReasonCommitNotTargeted     = "CommitNotTargeted"
	ReasonGenerationNotObserved = "GenerationNotObserved"
	ReasonAwaitingUpdate        = "AwaitingUpdate"
	// ReasonAwaitingApproval: the Stack requires approval
	// (spec.approval.required) and the plan of the commit waits for a
	// PlanApproval, or is being previewed; Plan describes it.
	ReasonAwaitingApproval       = "AwaitingApproval"
	ReasonSucceededOutsideWindow = "SucceededOutsideWindow"
	ReasonCloudUnavailable       = "CloudUnavailable"
	// ReasonCloudUnauthorized: Pulumi Cloud refused the access token (401
	// or 403), or no token could be read; the message says which.
	ReasonCloudUnauthorized = "CloudUnauthorized"
	// Running
	ReasonUpdateInProgress      = "UpdateInProgress"
	ReasonRetryingAfterFailure  = "RetryingAfterFailure"
	ReasonRetryingAfterConflict = "RetryingAfterConflict"
	// ReasonExportsPending: the update at the commit succeeded, and the
	// Stack has spec.exports: its outputs are not written to the exported
	// ConfigMap and Secret yet (the operator does so once it has recorded
	// the update). What reads them would read an older update's values.
	ReasonExportsPending = "ExportsPending"
	// Succeeded
	ReasonUpdateSucceeded = "UpdateSucceeded"
	// Failed
	ReasonStackStalled       = "StackStalled"
	ReasonChangesNotExpected = "ChangesNotExpected"
	ReasonPolicyViolation    = "PolicyViolation"
	ReasonOperationMismatch  = "OperationMismatch"
	ReasonStackDeleting      = "StackDeleting"
	ReasonUpdateFailed       = "UpdateFailed"
	// ReasonPlanNotApplied: the Stack requires approval and the up
	// constrained to the approved plan of the commit did not apply it (the
	// plan was stale, or the up failed): the operator previews again and
	// waits for a new approval rather than retrying; Plan says what
	// happened.
	ReasonPlanNotApplied = "PlanNotApplied"
	// ReasonPlanDenied: the plan of the commit has an operation the
	// caller's denyOn names; nothing of it was applied (the Stack awaits
	// approval).
	ReasonPlanDenied = "PlanDenied"
	// ReasonExportFailed: the update at the commit succeeded, but the
	// operator refused to export its outputs as spec.exports asks
	// (status.exports.reason ExportRefused or ExportConflict): nothing of
	// that update was written. The Stack is Stalled (ExportFailed) until a
	// change of the mapping, the conflicting object or the program makes an
	// update that exports.
	ReasonExportFailed = "ExportFailed"
	// ReasonApprovalNotRequired: the caller's denyOn cannot be honoured:
	// the Stack does not require approval, so it applies the commit without
	// a plan to check first.
	ReasonApprovalNotRequired = "ApprovalNotRequired"
)

// Operation is the Pulumi operation a verification asks about.
type Operation string

const (
	OperationUp      Operation = "up"
	OperationPreview Operation = "preview"
)

// Result is the JSON body of a verification (and of a Stack summary, where
// Phase says what the current state would answer for the commit the Stack
// last ran). It never carries configuration values, outputs or anything
// secret: only names, commits, times, states, change counts and content
// hashes, and in Message the service's own summary, which quotes another
// component's text (the Stalled message, the refusal of an export) only as
// a masked, bounded excerpt (Detail).
type Result struct {
	// Phase is Pending, Running, Succeeded or Failed.
	Phase Phase `json:"phase"`
	// Reason is a PascalCase constant saying why.
	Reason string `json:"reason"`
	// Message says it for a person: the service's own words, with at most
	// a Detail excerpt of the Stalled message or of the export's refusal.
	Message string `json:"message"`
	// Operation is the operation asked about (up or preview).
	Operation Operation `json:"operation,omitempty"`
	// RequestedCommit is the commit asked about, as given (lower case).
	RequestedCommit *Commit `json:"requestedCommit,omitempty"`
	// ObservedCommit is the commit of the update the answer is about: the
	// one in flight, or the last one that ran.
	ObservedCommit *Commit `json:"observedCommit,omitempty"`
	// Stack describes the Stack.
	Stack StackRef `json:"stack"`
	// Update is the update the answer is about, when there is one.
	Update *Update `json:"update,omitempty"`
	// StalledReason is the reason of the Stack's Stalled condition when the
	// answer is Failed because the Stack is stalled (reason StackStalled):
	// the operator's PascalCase constant, such as UpdateFailed, SpecInvalid,
	// SourceUnavailable or WorkspaceFailed. UpdateFailed also when the
	// update's failures reached the stall threshold before the condition was
	// written, or while a retry at the backoff cap runs.
	StalledReason string `json:"stalledReason,omitempty"`
	// Retry says when a failed update will be tried again (phase Running,
	// reason RetryingAfterFailure or RetryingAfterConflict).
	Retry *Retry `json:"retry,omitempty"`
	// Plan is the Stack's update plan of the commit, when the Stack
	// requires approval (reasons AwaitingApproval, PlanNotApplied, and a
	// rejection: StackStalled with stalledReason PlanRejected).
	Plan *Plan `json:"plan,omitempty"`
	// Exports is what became of the outputs of the update, when the Stack
	// has spec.exports and that update succeeded at the commit (reasons
	// UpdateSucceeded, SucceededOutsideWindow, ExportsPending,
	// ExportFailed).
	Exports *Exports `json:"exports,omitempty"`
	// ObservedAt is when the answer was computed.
	ObservedAt time.Time `json:"observedAt"`
}

// Plan describes a Stack's update plan (status.plan): no resource names,
// only counts, its fingerprint and what became of it.
type Plan struct {
	// Fingerprint is what a PlanApproval names.
	Fingerprint string `json:"fingerprint,omitempty"`
	// State is the plan's state (AwaitingApproval, Rejected, Applying,
	// Applied, Stale, Failed, PreviewFailed).
	State string `json:"state,omitempty"`
	// Summary counts the planned operations: "+1 ~2 -0".
	Summary string `json:"summary,omitempty"`
	// ExpiresAt is when the plan can no longer be approved.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	// Changes counts the affected resources by planned operation (create,
	// update, delete, replace).
	Changes map[string]int64 `json:"changes,omitempty"`
}

// Export states.
const (
	// ExportStateExported: the objects hold the update's outputs.
	ExportStateExported = "exported"
	// ExportStatePending: the update's outputs are not written yet.
	ExportStatePending = "pending"
	// ExportStateRefused: the operator refused to write them; nothing of
	// the update was written.
	ExportStateRefused = "refused"
)

// Exports describes the export of an update's outputs (the Stack's
// spec.exports and status.exports): the objects' names and content hashes,
// never their data or the outputs' names.
type Exports struct {
	// Update is the Update whose outputs these are.
	Update string `json:"update"`
	// State is exported, pending or refused.
	State string `json:"state"`
	// Reason says why they were refused: ExportRefused (the mapping does
	// not fit the outputs) or ExportConflict (an object of that name the
	// Stack did not create). The answer's message quotes the operator's
	// message.
	Reason string `json:"reason,omitempty"`
	// Time is when they were exported or refused.
	Time *time.Time `json:"time,omitempty"`
	// ConfigMap and Secret are the objects spec.exports names.
	ConfigMap *ExportedObject `json:"configMap,omitempty"`
	Secret    *ExportedObject `json:"secret,omitempty"`
}

// ExportedObject is an object outputs are exported to.
type ExportedObject struct {
	Name string `json:"name"`
	// Hash is the content hash of its data (its annotation
	// stackflow.io/content-hash) once it holds the update's outputs; empty
	// while they are pending or refused.
	Hash string `json:"hash,omitempty"`
}

// Commit is a commit SHA, full (as far as known) and short (7 characters).
type Commit struct {
	SHA   string `json:"sha"`
	Short string `json:"short"`
}

// NewCommit builds a Commit from a SHA or an artifact revision
// ("main@sha1:<sha>"); nil for an empty one.
func NewCommit(rev string) *Commit {
	sha := CommitSHA(rev)
	if sha == "" {
		return nil
	}
	return &Commit{SHA: sha, Short: revision.Short(sha)}
}

// StackRef names the Stack and what it has done. For a Kubernetes Stack,
// Namespace and Name; for a Pulumi Cloud stack, Organization, Project and
// Name.
type StackRef struct {
	Namespace          string `json:"namespace,omitempty"`
	Organization       string `json:"organization,omitempty"`
	Project            string `json:"project,omitempty"`
	Name               string `json:"name"`
	Generation         int64  `json:"generation,omitempty"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	// Branch is the branch a branch-tracking Stack follows.
	Branch string `json:"branch,omitempty"`
	// TargetCommit is the commit a pinned Stack targets (spec.commit).
	TargetCommit *Commit `json:"targetCommit,omitempty"`
	// LastSuccessfulCommit is the commit of the last successful update of
	// any kind (PKO's status.lastUpdate.lastSuccessfulCommit).
	LastSuccessfulCommit *Commit `json:"lastSuccessfulCommit,omitempty"`
	// LastAttemptedCommit is the commit of the last update, successful or
	// not.
	LastAttemptedCommit *Commit `json:"lastAttemptedCommit,omitempty"`
}

// Update states.
const (
	UpdateStatePending   = "pending"
	UpdateStateRunning   = "running"
	UpdateStateSucceeded = "succeeded"
	UpdateStateFailed    = "failed"
)

// Update describes one update (an Update object, or a Pulumi Cloud update).
type Update struct {
	Name string `json:"name"`
	// Type is up, preview, refresh or destroy.
	Type string `json:"type"`
	// State is pending, running, succeeded or failed.
	State     string     `json:"state"`
	StartTime *time.Time `json:"startTime,omitempty"`
	EndTime   *time.Time `json:"endTime,omitempty"`
	Permalink string     `json:"permalink,omitempty"`
	// Changes counts the resource operations the update made (or, for a
	// preview, would make). Absent when unknown (the Update object was
	// already deleted).
	Changes *Changes `json:"changes,omitempty"`
}

// Changes counts resource operations by kind, as Pulumi's change summary
// does.
type Changes struct {
	Create  int64 `json:"create"`
	Update  int64 `json:"update"`
	Delete  int64 `json:"delete"`
	Replace int64 `json:"replace"`
	Same    int64 `json:"same"`
}

// NewChanges folds a Pulumi change summary (operation → count) into Changes.
// A replacement counts once, as "replace" (Pulumi also reports its
// create-replacement and delete-replaced halves, which are not counted
// again).
func NewChanges(summary map[string]int64) *Changes {
	if summary == nil {
		return nil
	}
	return &Changes{
		Create:  summary["create"],
		Update:  summary["update"],
		Delete:  summary["delete"],
		Replace: summary["replace"],
		Same:    summary["same"],
	}
}

// Retry says when a failed update runs again.
type Retry struct {
	// Attempt is how many times in a row the update failed so far.
	Attempt int64 `json:"attempt"`
	// StallsAfter is the failure count at which the Stack stops retrying
	// at backoff and shows Stalled (the verification then fails).
	StallsAfter int64 `json:"stallsAfter,omitempty"`
	// NextTime is when the next attempt is due.
	NextTime *time.Time `json:"nextTime,omitempty"`
}

// Error is the JSON body of a 4xx/5xx answer.
type Error struct {
	// Code is the HTTP status code.
	Code int `json:"code"`
	// Reason is a PascalCase constant: BadRequest, Unauthorized, Forbidden,
	// NotFound, MethodNotAllowed, ServiceUnavailable.
	Reason string `json:"reason"`
	// Message says what is wrong and how to fix it.
	Message string `json:"message"`
}
