package admission

import (
	"context"
	"path/filepath"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestInstallManifestsAreValid creates every object of the kustomization in
// operator/config/default (except the CRDs, already installed) on the real API
// server with strict field validation: the install manifests are accepted as
// written.
func TestInstallManifestsAreValid(t *testing.T) {
	// Built as `kubectl apply -k` builds it (the bases are directories).
	dir := filepath.Join(substrate.RepoRoot(), "operator", "config", "default")
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	created := 0
	for _, r := range rm.Resources() {
		if r.GetKind() == "CustomResourceDefinition" {
			continue
		}
		data, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range decodeAll(t, data) {
			if err := cp.Client.Create(context.Background(), obj, strict); err != nil {
				t.Fatalf("%s %s rejected: %v", obj.GetKind(), obj.GetName(), err)
			}
			created++
		}
	}
	if created < 7 {
		t.Fatalf("created only %d objects", created)
	}
}
