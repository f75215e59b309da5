// Package v1 holds the pulumi.com/v1 API: Stack (a Pulumi stack kept up to date
// from a program source) and Program (a Pulumi YAML program stored in the cluster).
// The schema is wire-compatible with the Pulumi Kubernetes Operator v2, so existing
// manifests apply unchanged.
//
// It imports only Kubernetes API machinery and the auto.pulumi.com API.
//
// +kubebuilder:object:generate=true
// +groupName=pulumi.com
package v1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "pulumi.com", Version: "v1"}

	// SchemeBuilder registers this package's kinds.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
