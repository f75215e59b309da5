// Package crd holds the generated CustomResourceDefinitions; this test
// checks that `kubectl explain` documents every field of them.
package crd

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// TestEveryFieldExplained: every field of every kind's schema, in every
// served version, has a description, which is what `kubectl explain`
// prints for it (the Go doc comments, through controller-gen). The one
// subtree left out is a workspace's pod template: Kubernetes' own PodSpec,
// whose descriptions are dropped to keep the CRD under the API server's
// size limit (as PKO's are); `kubectl explain pod.spec` documents it.
func TestEveryFieldExplained(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in bases/ (%v)", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(b, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, v := range crd.Spec.Versions {
			if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				t.Errorf("%s %s: no schema", crd.Name, v.Name)
				continue
			}
			var missing []string
			walk(v.Schema.OpenAPIV3Schema, crd.Spec.Names.Kind, &missing)
			sort.Strings(missing)
			for _, m := range missing {
				t.Errorf("%s %s: `kubectl explain %s` prints no description", crd.Name, v.Name, m)
			}
		}
	}
}

func walk(s *apiextensionsv1.JSONSchemaProps, path string, missing *[]string) {
	for name, p := range s.Properties {
		child := path + "." + name
		if name == "podTemplate" {
			if p.Description == "" {
				*missing = append(*missing, child)
			}
			continue
		}
		if path != "" && (name == "metadata" || name == "apiVersion" || name == "kind") && !containsDot(path) {
			continue // the object's own metadata, apiVersion and kind: Kubernetes documents them
		}
		if p.Description == "" {
			*missing = append(*missing, child)
		}
		walk(&p, child, missing)
	}
	if s.Items != nil && s.Items.Schema != nil {
		walk(s.Items.Schema, path, missing)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		walk(s.AdditionalProperties.Schema, path, missing)
	}
}

func containsDot(s string) bool {
	for _, c := range s {
		if c == '.' {
			return true
		}
	}
	return false
}
