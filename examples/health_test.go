package examples

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	argocdhealth "github.com/stackflow-io/stackflow/argocd-health"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestHealthInstallCoversTheExamples: the argocd-health install the READMEs
// point at (the kustomize Component's argocd-cm patch and the Helm values)
// holds a health check for every Stackflow kind the Applications sync, and
// the Stack actions the argocd README describes; with those checks a
// freshly applied example Stack is Progressing, not Healthy (so sync wave 1
// really waits).
func TestHealthInstallCoversTheExamples(t *testing.T) {
	root := substrate.RepoRoot()
	var cm struct {
		Data map[string]string `json:"data"`
	}
	b, err := os.ReadFile(filepath.Join(root, "argocd-health", "install", "kustomize", "argocd-cm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	var values struct {
		Configs struct {
			CM map[string]string `json:"cm"`
		} `json:"configs"`
	}
	b, err = os.ReadFile(filepath.Join(root, "argocd-health", "install", "helm", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	stacks := 0
	for _, o := range exampleObjects(t) {
		group, _, _ := strings.Cut(str(o.obj, "apiVersion"), "/")
		if !strings.HasSuffix(group, "pulumi.com") {
			continue
		}
		key := "resource.customizations.health." + group + "_" + o.kind()
		if cm.Data[key] == "" || values.Configs.CM[key] == "" {
			t.Errorf("%s: the argocd-health install has no %s (kustomize: %v, Helm: %v)", o, key, cm.Data[key] != "", values.Configs.CM[key] != "")
		}
		if o.kind() != "Stack" {
			continue
		}
		stacks++
		h, err := argocdhealth.Health(&unstructured.Unstructured{Object: roundTrip(t, o.obj)})
		if err != nil || h == nil || h.Status != "Progressing" {
			t.Errorf("%s: health before the operator reconciled it: %+v, %v; want Progressing", o, h, err)
		}
	}
	if stacks == 0 {
		t.Fatal("no Stack in the examples")
	}
	actions := cm.Data["resource.customizations.actions.pulumi.com_Stack"]
	text := readme(t, "argocd")
	for _, a := range []string{"reconcile-now", "retry", "preview-on", "preview-off"} {
		if !strings.Contains(actions, a) {
			t.Errorf("the argocd-health install has no Stack action %s, which examples/argocd/README.md describes", a)
		}
		if !strings.Contains(text, a) {
			t.Errorf("examples/argocd/README.md does not describe the Stack action %s", a)
		}
	}
}
