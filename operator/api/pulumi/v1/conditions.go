package v1

// Stack condition types, following kstatus: Ready is always present; Reconciling
// and Stalled are present only while True.
const (
	// ReadyCondition is True when the last update succeeded for the current
	// generation, source revision and configuration.
	ReadyCondition = "Ready"
	// ReconcilingCondition is True while the operator works toward Ready
	// (waiting for a workspace, a prerequisite, a running update, or a retry).
	ReconcilingCondition = "Reconciling"
	// StalledCondition is True when the Stack cannot progress until the user
	// changes its spec, a referenced object or its source.
	StalledCondition = "Stalled"
	// DriftDetectedCondition is True when a resync refresh found that the
	// infrastructure differs from the stack's state.
	DriftDetectedCondition = "DriftDetected"
)

// Ready condition reasons.
const (
	// ReadyCompletedReason: the last update succeeded and is current.
	ReadyCompletedReason = "ProcessingCompleted"
	// NotReadyInProgressReason: work is under way (see Reconciling).
	NotReadyInProgressReason = "NotReadyInProgress"
	// NotReadyStalledReason: the Stack is stalled (see Stalled).
	NotReadyStalledReason = "NotReadyStalled"
	// NotReadyAwaitingApprovalReason: with spec.approval.required, the plan
	// of the Stack's change (status.plan) waits for a PlanApproval of its
	// fingerprint. Neither Reconciling nor Stalled: nothing runs until a
	// person decides. A Stackflow extension.
	NotReadyAwaitingApprovalReason = "AwaitingApproval"
)

// Reconciling condition reasons.
const (
	// ReconcilingProcessingReason: the workspace is being prepared or an update
	// is running.
	ReconcilingProcessingReason = "StackProcessing"
	// ReconcilingRetryReason: the last update failed and will be retried.
	ReconcilingRetryReason = "RetryingAfterFailure"
	// ReconcilingPrerequisiteNotSatisfiedReason: a prerequisite Stack has not
	// (recently enough) succeeded.
	ReconcilingPrerequisiteNotSatisfiedReason = "PrerequisiteNotSatisfied"
	// ReconcilingDeletingReason: the Stack is being deleted (destroy running).
	ReconcilingDeletingReason = "Deleting"
	// ReconcilingConflictRetryReason: another run held the Pulumi stack's lock
	// and retryOnUpdateConflict is on: the update is retried with backoff.
	ReconcilingConflictRetryReason = "RetryingAfterConflict"
	// ReconcilingResolvingSourceReason: the branch's repository is being
	// listed (its first listing, off the reconcile workers, within the
	// operator's --git-timeout); its end wakes the Stack.
	ReconcilingResolvingSourceReason = "ResolvingSource"
	// ReconcilingSourceUnreachableReason: the program source could not be
	// reached (a network error, a timeout, a server error): retried with
	// backoff, never Stalled.
	ReconcilingSourceUnreachableReason = "SourceUnreachable"
	// ReconcilingTransientErrorReason: an error talking to the Kubernetes API
	// or the workspace; retried with backoff.
	ReconcilingTransientErrorReason = "TransientError"
)

// Event reasons that are not Ready reasons.
const (
	// EventReasonDestroySkipped: a preview-mode Stack with destroyOnFinalize
	// was deleted without destroying anything. It is also the Stack's
	// Reconciling reason while it goes, which sends the event once.
	EventReasonDestroySkipped = "DestroySkipped"
	// EventReasonDriftDetected: a drift check found changes.
	EventReasonDriftDetected = "DriftDetected"
	// EventReasonDriftCheckFailed: a drift check could not run to the end
	// (status.driftCheck.failure says why).
	EventReasonDriftCheckFailed = "DriftCheckFailed"
)

// Stalled condition reasons.
const (
	// StalledSpecInvalidReason: the spec cannot be acted on as written.
	StalledSpecInvalidReason = "SpecInvalid"
	// StalledSourceUnavailableReason: the program source (repository, branch,
	// Program, Flux source) or a referenced ConfigMap or Secret is missing or
	// unreadable.
	StalledSourceUnavailableReason = "SourceUnavailable"
	// StalledConflictReason: another update holds the stack and
	// retryOnUpdateConflict is off.
	StalledConflictReason = "UpdateConflict"
	// StalledWorkspaceFailedReason: the workspace cannot be made ready.
	StalledWorkspaceFailedReason = "WorkspaceFailed"
	// StalledUpdateFailedReason: the update failed repeatedly; retries stop
	// until the spec or source changes.
	StalledUpdateFailedReason = "UpdateFailed"
	// StalledNamespaceTerminatingReason: the namespace is being deleted.
	StalledNamespaceTerminatingReason = "NamespaceTerminating"
	// StalledDestroyFailedReason: destroy on finalize failed; the finalizer is
	// kept until it succeeds.
	StalledDestroyFailedReason = "DestroyFailed"
	// StalledPlanRejectedReason: a PlanApproval rejected the plan of the
	// Stack's change; a new change (commit, configuration, inputs) or an
	// approval made after the rejection moves it on.
	StalledPlanRejectedReason = "PlanRejected"
	// StalledExportFailedReason: the outputs of the last update could not be
	// written as spec.exports asks (a secret output mapped into the
	// ConfigMap, a missing output or path, an object of that name the Stack
	// did not create); status.exports says why. The next update exports
	// again.
	StalledExportFailedReason = "ExportFailed"
	// StalledDependencyCycleReason: the Stack depends on itself through
	// prerequisites and the exports it reads; nothing runs until the cycle
	// is broken.
	StalledDependencyCycleReason = "DependencyCycle"
	// ReconcilingDependentsExistReason: a Stack being deleted with
	// destroyOnFinalize waits for the Stacks that depend on it (through
	// prerequisites or the exports they read) to be deleted first.
	ReconcilingDependentsExistReason = "DependentsExist"
)

// Event reasons of exports.
const (
	// EventReasonExported: the outputs of an update were written to the
	// objects spec.exports names.
	EventReasonExported = "Exported"
)

// Event reasons of approvals.
const (
	// EventReasonPlanStale: an up constrained to an approved plan stopped at
	// an operation the plan does not contain; the change is previewed again
	// and waits for a new approval.
	EventReasonPlanStale = "PlanStale"
	// EventReasonPlanApproved: a PlanApproval approved the plan; its up
	// starts.
	EventReasonPlanApproved = "PlanApproved"
)
