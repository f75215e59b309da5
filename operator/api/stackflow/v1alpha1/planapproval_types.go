package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PlanDecision is what a PlanApproval decides.
// +kubebuilder:validation:Enum=Approved;Rejected
type PlanDecision string

const (
	// Approved lets the Stack apply the plan, constrained to it.
	Approved PlanDecision = "Approved"
	// Rejected stops the change: the Stack is Stalled (PlanRejected) until a
	// new change, or an approval made later.
	Rejected PlanDecision = "Rejected"
)

// PlanApprovalSpec names the plan a person decides on.
type PlanApprovalSpec struct {
	// stackName is the Stack, in this PlanApproval's namespace, whose plan
	// is decided.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	StackName string `json:"stackName"`

	// fingerprint is the plan's fingerprint, as the Stack's
	// status.plan.fingerprint shows it (64 hexadecimal digits). An approval
	// of another fingerprint applies nothing.
	// +required
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9a-f]{64}$')",message="spec.fingerprint must be the 64 lowercase hexadecimal digits of the Stack's status.plan.fingerprint"
	Fingerprint string `json:"fingerprint"`

	// decision is Approved (the default) or Rejected.
	// +optional
	// +kubebuilder:default=Approved
	Decision PlanDecision `json:"decision,omitempty"`

	// approver is the user creating the PlanApproval, exactly as the API
	// server authenticates them (`kubectl auth whoami`): the admission
	// policy stackflow-plan-approval refuses any other value, so the record
	// names who decided.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Approver string `json:"approver"`

	// comment says why, for the record.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Comment string `json:"comment,omitempty"`
}

// PlanApproval approves or rejects one update plan of one Stack, named by
// its fingerprint. Creating one is the authorised act: RBAC's create on
// planapprovals in the Stack's namespace decides who may approve, and the
// admission policy stackflow-plan-approval checks that spec.approver is the
// creating user. Its spec cannot change once created. See
// docs/approvals.md.
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=pulumi
// +kubebuilder:printcolumn:name="Stack",type=string,JSONPath=`.spec.stackName`
// +kubebuilder:printcolumn:name="Decision",type=string,JSONPath=`.spec.decision`
// +kubebuilder:printcolumn:name="Approver",type=string,JSONPath=`.spec.approver`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Fingerprint",type=string,priority=1,JSONPath=`.spec.fingerprint`
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.spec) || self.spec == oldSelf.spec",message="a PlanApproval's spec cannot change: create another"
type PlanApproval struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec names the plan and the decision.
	// +required
	Spec PlanApprovalSpec `json:"spec"`
}

// PlanApprovalList is a list of PlanApprovals.
// +kubebuilder:object:root=true
type PlanApprovalList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PlanApproval `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PlanApproval{}, &PlanApprovalList{})
}
