package kargo

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The repository URLs examples/kargo is written for; Example replaces them.
const (
	ExampleProgramURL   = "https://github.com/example-org/infra.git"
	ExampleManifestsURL = "https://github.com/example-org/kargo-demo-manifests.git"
)

// The example's names.
const (
	ExampleProject        = "kargo-demo"
	ExampleStackNamespace = "kargo-demo-stacks"
	ExampleWarehouse      = "infra"
)

// ExampleStages are the example's Stages in promotion order.
var ExampleStages = []string{"dev", "preview", "test", "prod"}

// ExampleOptions say how examples/kargo is adapted to this machine.
type ExampleOptions struct {
	// RepoRoot is the Stackflow repository.
	RepoRoot string
	// ProgramURL and ManifestsURL replace the example's repository URLs
	// everywhere (Warehouse, Stages, Stacks, Applications, AppProject,
	// credentials).
	ProgramURL, ManifestsURL string
	// RetryCap, when set, is written as spec.retryMaxBackoffDurationSeconds
	// of each Stack of the manifests, so that a failing release is Stalled
	// (and its promotion fails) within a minute rather than after the
	// operator's default backoff (10 s doubling, five failures).
	RetryCap int64
}

// Example is examples/kargo rendered for this machine.
type Example struct {
	// Project is the Project (applied first: Kargo creates its namespace).
	Project *unstructured.Unstructured
	// Objects are the rest of `kubectl apply -k examples/kargo`:
	// ProjectConfig, Warehouse, Stages, AnalysisTemplate, the verifier's
	// ServiceAccount, token Secret and RoleBinding, and its token
	// refresher's ServiceAccount, Role, RoleBinding and CronJob.
	Objects []*unstructured.Unstructured
	// Argo are examples/kargo/argocd's AppProject and Applications.
	Argo []*unstructured.Unstructured
	// GitCredentials is git-credentials.template.yaml's Secret (its
	// placeholder username and password left for the caller to fill).
	GitCredentials *unstructured.Unstructured
	// Manifests are the manifests repository's files (manifests/, path →
	// content), byte for byte but for the URLs and RetryCap.
	Manifests map[string][]byte
}

// LoadExample renders examples/kargo (its kustomization with kustomize's
// API, as `kubectl apply -k` does) and reads its other files, replacing the
// repository URLs.
func LoadExample(o ExampleOptions) (*Example, error) {
	dir := filepath.Join(o.RepoRoot, "examples", "kargo")
	rewrite := strings.NewReplacer(ExampleProgramURL, o.ProgramURL, ExampleManifestsURL, o.ManifestsURL)
	rendered, err := kustomizeYAML(dir)
	if err != nil {
		return nil, err
	}
	objs, err := decode([]byte(rewrite.Replace(string(rendered))))
	if err != nil {
		return nil, err
	}
	ex := &Example{Manifests: map[string][]byte{}}
	for _, u := range objs {
		if u.GetKind() == "Project" {
			ex.Project = u
			continue
		}
		ex.Objects = append(ex.Objects, u)
	}
	if ex.Project == nil {
		return nil, errors.New("examples/kargo has no Project")
	}
	for _, f := range []string{"argocd/appproject.yaml", "argocd/applications.yaml", "git-credentials.template.yaml"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return nil, err
		}
		docs, err := decode([]byte(rewrite.Replace(string(b))))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if f == "git-credentials.template.yaml" {
			if len(docs) != 1 {
				return nil, fmt.Errorf("%s: want one Secret", f)
			}
			ex.GitCredentials = docs[0]
			continue
		}
		ex.Argo = append(ex.Argo, docs...)
	}
	root := filepath.Join(dir, "manifests")
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		b = []byte(rewrite.Replace(string(b)))
		if o.RetryCap > 0 {
			if b, err = setRetryCap(b, o.RetryCap); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
		}
		rel, _ := filepath.Rel(root, path)
		ex.Manifests[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ex, nil
}

// setRetryCap adds spec.retryMaxBackoffDurationSeconds after the `spec:`
// line of a Stack manifest, leaving every other byte (comments included) as
// it is, as a person editing the file would.
func setRetryCap(b []byte, seconds int64) ([]byte, error) {
	const spec = "\nspec:\n"
	i := bytes.Index(b, []byte(spec))
	if i < 0 || !bytes.Contains(b, []byte("kind: Stack\n")) {
		return nil, errors.New("not a Stack manifest with a block `spec:`")
	}
	at := i + len(spec)
	line := fmt.Sprintf("  retryMaxBackoffDurationSeconds: %d\n", seconds)
	return append(append(append([]byte{}, b[:at]...), line...), b[at:]...), nil
}

// decode reads the objects of a multi-document YAML stream (empty documents
// skipped).
func decode(b []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, err
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}
