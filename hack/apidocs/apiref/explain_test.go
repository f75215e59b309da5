package apiref

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/discovery"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestPagesAgreeWithKubectlExplain: the text of every field of every page
// is the description the API server publishes for it (what `kubectl
// explain` prints, from the server's OpenAPI v3), for the CRDs installed in
// a real kube-apiserver; and each committed page is what the generator
// makes now.
func TestPagesAgreeWithKubectlExplain(t *testing.T) {
	cp, err := substrate.StartControlPlane()
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	dc, err := discovery.NewDiscoveryClientForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	root := substrate.RepoRoot()
	for _, k := range Kinds {
		t.Run(k.Kind, func(t *testing.T) {
			page, err := Page(k, root)
			if err != nil {
				t.Fatal(err)
			}
			committed, err := os.ReadFile(filepath.Join(root, "docs", "api", k.File))
			if err != nil || string(committed) != page {
				t.Errorf("docs/api/%s is not what hack/apidocs makes (run make generate): %v", k.File, err)
			}
			crd, err := readCRD(filepath.Join(root, CRDDir, k.CRD))
			if err != nil {
				t.Fatal(err)
			}
			v, _ := storage(crd)
			published := publishedSchema(t, dc, k.Group, v, k.Kind)
			rows := 0
			for _, line := range strings.Split(page, "\n") {
				cells := strings.Split(line, " | ")
				if len(cells) != 5 || !strings.HasPrefix(cells[0], "| `spec") && !strings.HasPrefix(cells[0], "| `status") {
					continue
				}
				path := strings.Trim(strings.TrimPrefix(cells[0], "| "), "`")
				desc, ok := describe(published, path)
				if !ok {
					if !strings.Contains(path, "podTemplate") {
						t.Errorf("%s: the API server publishes no field %s", k.Kind, path)
					}
					continue
				}
				rows++
				if got := strings.TrimSuffix(cells[4], " |"); got != cell(desc) {
					t.Errorf("%s.%s: the page says %q, kubectl explain %q", strings.ToLower(k.Kind), path, got, cell(desc))
				}
			}
			if rows < 3 {
				t.Fatalf("%s: only %d fields compared", k.Kind, rows)
			}
		})
	}
}

// publishedSchema is the kind's schema from the API server's OpenAPI v3
// (the document kubectl explain reads), once the CRD is served there.
func publishedSchema(t *testing.T, dc *discovery.DiscoveryClient, group, version, kind string) map[string]any {
	t.Helper()
	var schema map[string]any
	substrate.Eventually(t, time.Minute, "the OpenAPI v3 of "+group+"/"+version, func() (bool, error) {
		paths, err := dc.OpenAPIV3().Paths()
		if err != nil {
			return false, err
		}
		gv, ok := paths["apis/"+group+"/"+version]
		if !ok {
			return false, nil
		}
		b, err := gv.Schema("application/json")
		if err != nil {
			return false, err
		}
		var doc struct {
			Components struct {
				Schemas map[string]map[string]any `json:"schemas"`
			} `json:"components"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			return false, err
		}
		for name, s := range doc.Components.Schemas {
			if strings.HasSuffix(name, "."+version+"."+kind) {
				schema = s
				return true, nil
			}
		}
		return false, nil
	})
	return schema
}

// describe follows a page's field path (spec.a[].b.<key>.c) in a published
// schema and returns its description.
func describe(schema map[string]any, path string) (string, bool) {
	cur := schema
	for _, part := range strings.Split(path, ".") {
		items := strings.HasSuffix(part, "[]")
		part = strings.TrimSuffix(part, "[]")
		if part == "<key>" {
			next, ok := cur["additionalProperties"].(map[string]any)
			if !ok {
				return "", false
			}
			cur = next
		} else {
			props, _ := cur["properties"].(map[string]any)
			next, ok := props[part].(map[string]any)
			if !ok {
				return "", false
			}
			cur = next
		}
		if items {
			next, ok := cur["items"].(map[string]any)
			if !ok {
				return "", false
			}
			cur = next
		}
	}
	d, _ := cur["description"].(string)
	return d, true
}
