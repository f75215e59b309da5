// Package v1alpha1 holds the auto.pulumi.com/v1alpha1 API: Workspace (an isolated
// environment that runs Pulumi for one Stack) and Update (one Pulumi operation run in
// a Workspace). The schema is wire-compatible with the Pulumi Kubernetes Operator v2.
//
// It imports only Kubernetes API machinery.
//
// +kubebuilder:object:generate=true
// +groupName=auto.pulumi.com
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "auto.pulumi.com", Version: "v1alpha1"}

	// SchemeBuilder registers this package's kinds.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
