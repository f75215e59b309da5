package v1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Expression is a Pulumi YAML expression: any JSON value, including ${...}
// interpolations and fn:: invocations.
// +kubebuilder:object:generate=false
type Expression = apiextensionsv1.JSON

// Any is any JSON value.
// +kubebuilder:object:generate=false
type Any = apiextensionsv1.JSON

// ProgramSpec is a Pulumi YAML program (the body of a Pulumi.yaml, without the
// project name and runtime, which the operator fills in).
type ProgramSpec struct {
	// configuration declares the program's configuration keys, their types and
	// defaults.
	// +optional
	Configuration map[string]Configuration `json:"configuration,omitempty"`

	// resources declares the program's resources, keyed by logical name.
	// +optional
	Resources map[string]Resource `json:"resources,omitempty"`

	// variables are named values computed once and usable in expressions.
	// +optional
	Variables map[string]Expression `json:"variables,omitempty"`

	// outputs are the stack outputs, keyed by name.
	// +optional
	Outputs map[string]Expression `json:"outputs,omitempty"`

	// packages pins the resource plugins the program uses (name → version or
	// parameterized package descriptor).
	// +optional
	Packages map[string]string `json:"packages,omitempty"`
}

// ConfigType is the type of a configuration value.
// +kubebuilder:validation:Enum={"String", "Number", "List<Number>", "List<String>"}
type ConfigType string

// Configuration declares one configuration key.
type Configuration struct {
	// type of the value: String, Number, List<Number> or List<String>.
	// +optional
	Type ConfigType `json:"type,omitempty"`

	// default is the value used when the stack sets none.
	// +optional
	Default *Any `json:"default,omitempty"`
}

// Resource declares one resource of the program.
type Resource struct {
	// type is the resource type token, e.g. "stackflow:index:Record".
	// +kubebuilder:validation:MinLength=1
	Type string `json:"type"`

	// properties are the resource's input properties.
	// +optional
	Properties map[string]Expression `json:"properties,omitempty"`

	// options are the resource options.
	// +optional
	Options *Options `json:"options,omitempty"`

	// get reads an existing resource instead of managing one.
	// +optional
	Get *Getter `json:"get,omitempty"`
}

// Options are Pulumi resource options.
type Options struct {
	// additionalSecretOutputs lists output properties to treat as secrets.
	// +optional
	AdditionalSecretOutputs []string `json:"additionalSecretOutputs,omitempty"`
	// aliases lists former URNs of the resource.
	// +optional
	Aliases []string `json:"aliases,omitempty"`
	// customTimeouts overrides the provider's operation timeouts.
	// +optional
	CustomTimeouts *CustomTimeouts `json:"customTimeouts,omitempty"`
	// deleteBeforeReplace deletes the old resource before creating its
	// replacement.
	// +optional
	DeleteBeforeReplace bool `json:"deleteBeforeReplace,omitempty"`
	// dependsOn lists explicit dependencies.
	// +optional
	DependsOn []Expression `json:"dependsOn,omitempty"`
	// ignoreChanges lists properties whose changes are ignored.
	// +optional
	IgnoreChanges []string `json:"ignoreChanges,omitempty"`
	// import adopts an existing resource by its provider ID.
	// +optional
	Import string `json:"import,omitempty"`
	// parent is the resource's parent.
	// +optional
	Parent *Expression `json:"parent,omitempty"`
	// protect prevents deletion of the resource.
	// +optional
	Protect bool `json:"protect,omitempty"`
	// provider is the explicit provider resource.
	// +optional
	Provider *Expression `json:"provider,omitempty"`
	// providers maps packages to explicit provider resources for children.
	// +optional
	Providers map[string]Expression `json:"providers,omitempty"`
	// version pins the provider plugin version.
	// +optional
	Version string `json:"version,omitempty"`
}

// CustomTimeouts are operation timeouts, as durations like "5m".
type CustomTimeouts struct {
	// create timeout.
	// +optional
	Create string `json:"create,omitempty"`
	// delete timeout.
	// +optional
	Delete string `json:"delete,omitempty"`
	// update timeout.
	// +optional
	Update string `json:"update,omitempty"`
}

// Getter reads an existing resource.
type Getter struct {
	// id is the provider ID of the resource to read.
	// +kubebuilder:validation:MinLength=1
	Id string `json:"id"`
	// state are extra properties that qualify the lookup.
	// +optional
	State map[string]Expression `json:"state,omitempty"`
}

// ProgramStatus is the observed state of a Program.
type ProgramStatus struct {
	// observedGeneration is the generation the artifact was built from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// artifact is the published tarball of the program.
	// +optional
	Artifact *Artifact `json:"artifact,omitempty"`
}

// Program is a Pulumi YAML program stored in the cluster, which Stacks reference
// with spec.programRef. The operator publishes each generation as a tarball
// artifact.
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:resource:categories=pulumi
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Revision",type="string",JSONPath=".status.artifact.revision"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="URL",type="string",priority=1,JSONPath=".status.artifact.url"
type Program struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// program is the Pulumi YAML program.
	Program ProgramSpec `json:"program,omitempty"`
	// status is the observed state of the Program.
	Status ProgramStatus `json:"status,omitempty"`
}

// ProgramList is a list of Programs.
// +kubebuilder:object:root=true
type ProgramList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Program `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Program{}, &ProgramList{})
}
