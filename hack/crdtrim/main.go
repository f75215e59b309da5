// Command crdtrim shrinks generated CRDs by dropping the descriptions of embedded
// core Kubernetes pod specs (spec.podTemplate.spec). Those schemas are large copies
// of the Pod API, documented by `kubectl explain pod.spec`; with their text the
// Stack CRD (two served versions, each embedding a Workspace template) would exceed
// the API server's object size limit. Our own fields keep their descriptions.
//
// Usage: crdtrim FILE...
package main

import (
	"fmt"
	"os"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

func main() {
	for _, path := range os.Args[1:] {
		if err := trimFile(path); err != nil {
			fmt.Fprintf(os.Stderr, "crdtrim: %s: %v\n", path, err)
			os.Exit(1)
		}
	}
}

func trimFile(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		return fmt.Errorf("parse CRD: %w", err)
	}
	for i := range crd.Spec.Versions {
		if s := crd.Spec.Versions[i].Schema; s != nil && s.OpenAPIV3Schema != nil {
			walk(s.OpenAPIV3Schema, false)
		}
	}
	out, err := marshalWithoutStatus(&crd)
	if err != nil {
		return err
	}
	before := len(raw)
	if err := os.WriteFile(path, append([]byte("---\n"), out...), 0o644); err != nil {
		return err
	}
	fmt.Printf("crdtrim: %s %d → %d bytes\n", path, before, len(out)+4)
	return nil
}

// walk visits a schema; below a podTemplate's spec, descriptions are removed.
func walk(s *apiextensionsv1.JSONSchemaProps, strip bool) {
	if strip {
		s.Description = ""
	}
	for name, p := range s.Properties {
		childStrip := strip
		if name == "spec" && isPodTemplate(s) {
			childStrip = true
		}
		walk(&p, childStrip)
		s.Properties[name] = p
	}
	if s.Items != nil && s.Items.Schema != nil {
		walk(s.Items.Schema, strip)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		walk(s.AdditionalProperties.Schema, strip)
	}
}

// isPodTemplate reports whether s is an EmbeddedPodTemplateSpec: metadata + spec
// where spec has containers.
func isPodTemplate(s *apiextensionsv1.JSONSchemaProps) bool {
	spec, ok := s.Properties["spec"]
	if !ok {
		return false
	}
	_, hasContainers := spec.Properties["containers"]
	_, hasMeta := s.Properties["metadata"]
	return hasContainers && hasMeta
}

// marshalWithoutStatus renders the CRD as YAML without its (empty) status, as
// controller-gen writes it.
func marshalWithoutStatus(crd *apiextensionsv1.CustomResourceDefinition) ([]byte, error) {
	js, err := yaml.Marshal(crd)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := yaml.Unmarshal(js, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	return yaml.Marshal(m)
}
