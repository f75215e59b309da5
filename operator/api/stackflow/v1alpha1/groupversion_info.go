// Package v1alpha1 holds the stackflow.io/v1alpha1 API: Stackflow's own kinds,
// beside PKO's (pulumi.com, auto.pulumi.com), which it serves unchanged.
// PlanApproval approves (or rejects) one update plan of one Stack by its
// fingerprint.
//
// It imports only Kubernetes API machinery.
//
// +kubebuilder:object:generate=true
// +groupName=stackflow.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "stackflow.io", Version: "v1alpha1"}

	// SchemeBuilder registers this package's kinds.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
