package v1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Artifact is a tarball of a program, published over HTTP by the operator.
type Artifact struct {
	// path is the artifact's path relative to the artifact server root.
	// +required
	Path string `json:"path"`

	// url is the HTTP address the artifact can be downloaded from.
	// +required
	URL string `json:"url"`

	// revision identifies the content the artifact was built from (for a
	// Program, "<generation>/sha256:<digest>").
	// +required
	Revision string `json:"revision"`

	// digest is the artifact's digest, "sha256:<hex>".
	// +optional
	// +kubebuilder:validation:Pattern="^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$"
	Digest string `json:"digest,omitempty"`

	// lastUpdateTime is when the artifact was last published.
	// +required
	LastUpdateTime metav1.Time `json:"lastUpdateTime"`

	// size is the artifact's size in bytes.
	// +optional
	Size *int64 `json:"size,omitempty"`

	// metadata holds extra information about the artifact.
	// +optional
	Metadata map[string]string `json:"metadata,omitempty"`
}
