// Package config holds the install manifests of stackflow-analysis (the
// kustomizations under default/, pulumi-cloud/, templates/ and
// kargo-project/) and gives other Go code, tests in particular, the Argo
// Rollouts templates in templates/ as typed objects, so they can run the
// templates' metrics in-process against a verification server.
package config

import (
	"bufio"
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"time"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

//go:embed templates/analysistemplates.yaml templates/clusteranalysistemplates.yaml
var templatesFS embed.FS

// The template names (the same for the AnalysisTemplates and the
// ClusterAnalysisTemplates).
const (
	// AppliedTemplate passes when `pulumi up` of the commit succeeded.
	AppliedTemplate = "stackflow-stack-applied"
	// PreviewedTemplate passes when `pulumi preview` of the commit succeeded.
	PreviewedTemplate = "stackflow-stack-previewed"
)

// The metrics of each template.
const (
	// VerifiedMetric ends the run on the service's verdict: Successful on
	// phase Succeeded, Failed on phase Failed.
	VerifiedMetric = "verified"
	// DeadlineMetric fails the run when no Succeeded was seen in
	// timeoutMeasurements measurements.
	DeadlineMetric = "deadline"
)

// The templates' arguments.
const (
	ArgNamespace           = "namespace"
	ArgStack               = "stack"
	ArgCommit              = "commit"
	ArgToken               = "token"
	ArgServer              = "server"
	ArgTimeoutMeasurements = "timeoutMeasurements"
)

const (
	// Interval is the time between two measurements of a metric.
	Interval = 10 * time.Second
	// InitialDelay is how long each metric waits before its first
	// measurement: long enough for Kargo to record the AnalysisRun in its
	// Stage's status before the run can end (see the templates' comment).
	InitialDelay = 5 * time.Second
	// DefaultTimeoutMeasurements is the default of timeoutMeasurements.
	DefaultTimeoutMeasurements = 180
	// DefaultTimeout is how long, at least, a run waits for Succeeded or
	// Failed before failing (measurement errors do not count toward it).
	DefaultTimeout = DefaultTimeoutMeasurements * Interval
	// DefaultServer is the default of the server argument.
	DefaultServer = "http://stackflow-analysis.stackflow-system.svc:8080"
	// TokenSecret and TokenSecretKey are where the token argument is read
	// from by default, in the AnalysisRun's namespace.
	TokenSecret    = "stackflow-verifier-token"
	TokenSecretKey = "token"
)

// AnalysisTemplates returns the AnalysisTemplates of
// templates/analysistemplates.yaml (without a namespace), freshly decoded:
// the caller may modify them.
func AnalysisTemplates() ([]*rolloutsv1alpha1.AnalysisTemplate, error) {
	var out []*rolloutsv1alpha1.AnalysisTemplate
	err := decode("templates/analysistemplates.yaml", "AnalysisTemplate", func() any {
		t := &rolloutsv1alpha1.AnalysisTemplate{}
		out = append(out, t)
		return t
	})
	return out, err
}

// ClusterAnalysisTemplates returns the ClusterAnalysisTemplates of
// templates/clusteranalysistemplates.yaml, freshly decoded.
func ClusterAnalysisTemplates() ([]*rolloutsv1alpha1.ClusterAnalysisTemplate, error) {
	var out []*rolloutsv1alpha1.ClusterAnalysisTemplate
	err := decode("templates/clusteranalysistemplates.yaml", "ClusterAnalysisTemplate", func() any {
		t := &rolloutsv1alpha1.ClusterAnalysisTemplate{}
		out = append(out, t)
		return t
	})
	return out, err
}

// decode strictly decodes every document of an embedded file, each of kind
// kind, into a new object from next.
func decode(name, kind string, next func() any) error {
	data, err := templatesFS.ReadFile(name)
	if err != nil {
		return err
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		if meta.APIVersion != rolloutsv1alpha1.SchemeGroupVersion.String() || meta.Kind != kind {
			return fmt.Errorf("%s: document %d is a %s %s, want %s %s", name, i, meta.APIVersion, meta.Kind, rolloutsv1alpha1.SchemeGroupVersion, kind)
		}
		if err := yaml.UnmarshalStrict(doc, next()); err != nil {
			return fmt.Errorf("%s: document %d: %w", name, i, err)
		}
	}
}

// stripComments drops the comment lines of a YAML document.
func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(out, line)
		}
	}
	return bytes.Join(out, []byte("\n"))
}
