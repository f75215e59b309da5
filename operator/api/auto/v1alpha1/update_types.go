package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// UpdateType is the Pulumi operation an Update runs.
type UpdateType string

const (
	// PreviewType runs `pulumi preview`: computes changes without applying them.
	PreviewType UpdateType = "preview"
	// UpType runs `pulumi up`.
	UpType UpdateType = "up"
	// DestroyType runs `pulumi destroy`.
	DestroyType UpdateType = "destroy"
	// RefreshType runs `pulumi refresh`.
	RefreshType UpdateType = "refresh"
)

// Update condition types: PKO's Progressing, Complete and Failed, and beside
// them kstatus's Ready, Reconciling and Stalled (Ready always present,
// Reconciling and Stalled only while True), so kstatus readers (Argo CD,
// Flux, kubectl wait --for=condition=Ready) see a running Update in progress
// and a failed one failed. Both sets carry the same reasons.
const (
	// UpdateConditionTypeProgressing is True while the operation runs.
	UpdateConditionTypeProgressing = "Progressing"
	// UpdateConditionTypeComplete is True once the operation has ended, whatever
	// its result.
	UpdateConditionTypeComplete = "Complete"
	// UpdateConditionTypeFailed is True when the operation ended unsuccessfully.
	UpdateConditionTypeFailed = "Failed"
	// UpdateConditionTypeReady is True once the operation has succeeded; False,
	// with the reason, while it waits, runs, or after it failed.
	UpdateConditionTypeReady = "Ready"
	// UpdateConditionTypeReconciling is True while the operation waits to
	// start (NotStarted) or runs (Progressing).
	UpdateConditionTypeReconciling = "Reconciling"
	// UpdateConditionTypeStalled is True once the operation has ended
	// unsuccessfully (an Update runs once; its Stack decides what next).
	UpdateConditionTypeStalled = "Stalled"
)

// Update condition reasons.
const (
	// UpdateReasonNotStarted: the update waits for its workspace.
	UpdateReasonNotStarted = "NotStarted"
	// UpdateReasonProgressing: the operation is running.
	UpdateReasonProgressing = "Progressing"
	// UpdateReasonSucceeded: the operation succeeded.
	UpdateReasonSucceeded = "UpdateSucceeded"
	// UpdateReasonFailed: the operation failed; status.message has the engine's
	// error.
	UpdateReasonFailed = "UpdateFailed"
	// UpdateReasonConflict: another update holds the stack; retried with backoff.
	UpdateReasonConflict = "UpdateConflict"
	// UpdateReasonStackNotFound: the stack does not exist in the backend.
	UpdateReasonStackNotFound = "StackNotFound"
	// UpdateReasonAborted: the run disappeared (workspace restarted or deleted)
	// before it reported a result.
	UpdateReasonAborted = "Aborted"
	// UpdateReasonCanceled: the run was canceled.
	UpdateReasonCanceled = "Canceled"
	// UpdateReasonPlanStale: an up constrained to a plan (spec.planSecretName)
	// stopped at an operation the plan does not contain (status.planViolation).
	// A Stackflow extension.
	UpdateReasonPlanStale = "PlanStale"
)

// UpdateSpec is one Pulumi operation to run in a Workspace.
type UpdateSpec struct {
	// workspaceName is the Workspace (in the same namespace) that runs the update.
	// +kubebuilder:validation:MaxLength=253
	WorkspaceName string `json:"workspaceName,omitempty"`

	// stackName is the fully qualified Pulumi stack to operate on.
	// +kubebuilder:validation:MaxLength=512
	StackName string `json:"stackName,omitempty"`

	// type is the operation: preview, up, refresh or destroy.
	// +kubebuilder:validation:XValidation:rule="self in ['preview', 'up', 'refresh', 'destroy']",message="type must be one of preview, up, refresh, destroy"
	Type UpdateType `json:"type,omitempty"`

	// ttlAfterCompleted is how long a finished Update is kept before it is
	// deleted. Default 24h.
	// +optional
	TtlAfterCompleted *metav1.Duration `json:"ttlAfterCompleted,omitempty"`

	// parallel is the number of resource operations run in parallel (--parallel).
	// +optional
	// +kubebuilder:validation:Minimum=1
	Parallel *int32 `json:"parallel,omitempty"`

	// message is the description recorded with the update (--message).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message *string `json:"message,omitempty"`

	// expectNoChanges fails the operation if any change would be made.
	// +optional
	ExpectNoChanges *bool `json:"expectNoChanges,omitempty"`

	// replace lists resource URNs to replace (--replace).
	// +optional
	// +kubebuilder:validation:MaxItems=1024
	Replace []string `json:"replace,omitempty"`

	// target limits the operation to these resource URNs (--target).
	// +optional
	// +kubebuilder:validation:MaxItems=1024
	Target []string `json:"target,omitempty"`

	// targetDependents also operates on resources that depend on the targets.
	// +optional
	TargetDependents *bool `json:"targetDependents,omitempty"`

	// refresh refreshes the state from the providers before the operation.
	// +optional
	Refresh *bool `json:"refresh,omitempty"`

	// continueOnError keeps operating on independent resources after one fails.
	// +optional
	ContinueOnError *bool `json:"continueOnError,omitempty"`

	// remove deletes the stack and its configuration after a successful destroy.
	// +optional
	Remove *bool `json:"remove,omitempty"`

	// runProgram runs the program during refresh and destroy, so resources the
	// program reads are known.
	// +optional
	RunProgram *bool `json:"runProgram,omitempty"`

	// savePlan, for a preview, saves its update plan (pulumi preview
	// --save-plan) in an immutable Secret named in status.planSecretName
	// (key plan.json, at most 512 KiB). A Stackflow extension.
	// +optional
	SavePlan *bool `json:"savePlan,omitempty"`

	// planSecretName, for an up, names a Secret of the Update's namespace
	// holding an update plan (key plan.json): the up is constrained to it
	// (pulumi up --plan) and fails, with reason PlanStale, at the first
	// operation it does not contain. A Stackflow extension.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PlanSecretName string `json:"planSecretName,omitempty"`
}

// UpdateStatus is the observed state of an Update.
type UpdateStatus struct {
	// observedGeneration is the generation of the spec the status reflects.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// startTime is when the operation started.
	// +optional
	StartTime metav1.Time `json:"startTime,omitempty"`

	// endTime is when the operation ended.
	// +optional
	EndTime metav1.Time `json:"endTime,omitempty"`

	// permalink links to the update in the backend, when the backend has one.
	// +optional
	Permalink string `json:"permalink,omitempty"`

	// message is the operation's result message: the engine's error on failure.
	// It never contains secret values.
	// +optional
	Message string `json:"message,omitempty"`

	// outputs is the name of the immutable Secret that holds the stack outputs
	// after a successful up (<update>-stack-outputs).
	// +optional
	Outputs string `json:"outputs,omitempty"`

	// planSecretName is the Secret holding the update plan a preview with
	// spec.savePlan saved. A Stackflow extension.
	// +optional
	PlanSecretName string `json:"planSecretName,omitempty"`

	// planViolation, for an up constrained to a plan, is the first operation
	// the plan did not contain, in the engine's words. A Stackflow extension.
	// +optional
	PlanViolation string `json:"planViolation,omitempty"`

	// changes counts the resource operations of the update by kind (create,
	// update, delete, replace, same, …).
	// +optional
	Changes map[string]int64 `json:"changes,omitempty"`

	// resources lists the resources the update changed (or a preview would
	// change), as "<operation> <urn>"; at most 100.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	Resources []string `json:"resources,omitempty"`

	// conditions describe the update: Progressing while it runs, then Complete,
	// and Failed when it did not succeed (PKO's); and for kstatus, Ready
	// (True once it succeeded), Reconciling while it waits or runs, and
	// Stalled once it failed.
	// +optional
	// +patchMergeKey=type
	// +patchStrategy=merge
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// projectInfo names the Pulumi project the update ran.
	// +optional
	ProjectInfo *ProjectInfo `json:"projectInfo,omitempty"`
}

// ProjectInfo names a Pulumi project and its runtime.
type ProjectInfo struct {
	// name is the Pulumi project name.
	Name string `json:"name"`
	// runtime is the Pulumi project runtime.
	Runtime string `json:"runtime"`
}

// Update is one Pulumi operation (preview, up, refresh or destroy) run in a
// Workspace, and its result.
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=pulumi
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Workspace",type=string,JSONPath=`.spec.workspaceName`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Progressing",type=string,JSONPath=`.status.conditions[?(@.type=="Progressing")].status`
// +kubebuilder:printcolumn:name="Failed",type=string,JSONPath=`.status.conditions[?(@.type=="Failed")].status`
// +kubebuilder:printcolumn:name="Complete",type=string,JSONPath=`.status.conditions[?(@.type=="Complete")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Start Time",type=date,priority=1,JSONPath=`.status.startTime`
// +kubebuilder:printcolumn:name="End Time",type=date,priority=1,JSONPath=`.status.endTime`
// +kubebuilder:printcolumn:name="URL",type=string,priority=1,JSONPath=`.status.permalink`
type Update struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the operation to run.
	Spec UpdateSpec `json:"spec,omitempty"`
	// status is the operation's progress and result.
	Status UpdateStatus `json:"status,omitempty"`
}

// UpdateList is a list of Updates.
// +kubebuilder:object:root=true
type UpdateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Update `json:"items"`
}

// GetConditions returns the Update's status conditions for change in place,
// so that condition helpers serve every kind alike.
func (u *Update) GetConditions() *[]metav1.Condition { return &u.Status.Conditions }

func init() {
	SchemeBuilder.Register(&Update{}, &UpdateList{})
}
