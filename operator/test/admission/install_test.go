package admission

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/stackflow-io/stackflow/operator/test/substrate"
)

// TestInstallManifestsAreValid creates every object of the kustomization in
// operator/config/default (except the CRDs, already installed) on the real API
// server with strict field validation: the install manifests are accepted as
// written.
func TestInstallManifestsAreValid(t *testing.T) {
	dir := filepath.Join(substrate.RepoRoot(), "operator", "config", "default")
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct{ Resources []string }
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatal(err)
	}
	created := 0
	for _, res := range k.Resources {
		if strings.Contains(res, "/crd/") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, res))
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range decodeAll(t, data) {
			if err := cp.Client.Create(context.Background(), obj, strict); err != nil {
				t.Fatalf("%s: %s %s rejected: %v", res, obj.GetKind(), obj.GetName(), err)
			}
			created++
		}
	}
	if created < 7 {
		t.Fatalf("created only %d objects", created)
	}
}
