// Package v1alpha1 serves the older pulumi.com/v1alpha1 version of Stack, as the
// Pulumi Kubernetes Operator does, with exactly the v1 schema (v1 is stored, so
// no conversion is needed).
//
// +kubebuilder:object:generate=true
// +groupName=pulumi.com
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "pulumi.com", Version: "v1alpha1"}

	// SchemeBuilder registers this package's kinds.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Stack is the pulumi.com/v1alpha1 form of a Stack; see pulumi.com/v1 Stack.
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=pulumi
// +kubebuilder:subresource:status
// +kubebuilder:deprecatedversion:warning="pulumi.com/v1alpha1 Stack is deprecated; use pulumi.com/v1"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Commit",type=string,JSONPath=`.status.lastUpdate.lastSuccessfulCommit`
// +kubebuilder:printcolumn:name="Last Update",type=string,JSONPath=`.status.lastUpdate.state`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Stack",type=string,priority=1,JSONPath=`.spec.stack`
// +kubebuilder:printcolumn:name="Branch",type=string,priority=1,JSONPath=`.spec.branch`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 42",message="Stack name must be at most 42 characters: it names the Workspace and its pods"
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.prerequisites) || self.spec.prerequisites.all(p, p.name != self.metadata.name)",message="a Stack cannot be its own prerequisite"
type Stack struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the Stack.
	Spec pulumiv1.StackSpec `json:"spec,omitempty"`
	// status is the observed state of the Stack.
	Status pulumiv1.StackStatus `json:"status,omitempty"`
}

// StackList is a list of Stacks.
// +kubebuilder:object:root=true
type StackList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Stack `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Stack{}, &StackList{})
}
