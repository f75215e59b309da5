package examples

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// object is one Kubernetes object of the examples, with where it came from.
type object struct {
	// file is the path of the YAML file relative to the repository root (for
	// a kustomization: its kustomization.yaml).
	file string
	// doc is the 1-based document number in file (0 for a kustomize build).
	doc int
	obj map[string]any
}

func (o object) kind() string      { return str(o.obj, "kind") }
func (o object) name() string      { return str(o.obj, "metadata", "name") }
func (o object) namespace() string { return str(o.obj, "metadata", "namespace") }

func (o object) String() string {
	where := o.file
	if o.doc > 0 {
		where = fmt.Sprintf("%s (document %d)", o.file, o.doc)
	}
	id := o.name()
	if ns := o.namespace(); ns != "" {
		id = ns + "/" + id
	}
	return fmt.Sprintf("%s: %s %s", where, o.kind(), id)
}

func examplesDir() string { return filepath.Join(substrate.RepoRoot(), "examples") }

func rel(path string) string {
	r, err := filepath.Rel(substrate.RepoRoot(), path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(r)
}

// isTemplate says whether a YAML file is a template for the user to copy and
// fill (never applied by a kustomization; still validated on its own).
func isTemplate(name string) bool { return strings.HasSuffix(name, ".template.yaml") }

func isYAML(name string) bool {
	return strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
}

// readDocs splits a YAML file into its non-empty documents, as JSON-shaped
// maps. Document numbers count every document, empty ones too, as an editor
// (and Kargo's yaml-update) would.
func readDocs(t testing.TB, path string) []object {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []object
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", rel(path), i, err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("%s: document %d: %v", rel(path), i, err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, object{file: rel(path), doc: i, obj: roundTrip(t, m)})
	}
}

// kustomizeBuild renders a kustomization directory as `kubectl apply -k`
// would (kustomize's krusty, default options: files only from the
// kustomization's own root, other kustomizations as resources allowed).
func kustomizeBuild(t testing.TB, dir string) []object {
	t.Helper()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", rel(dir), err)
	}
	var out []object
	for _, r := range rm.Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, object{file: rel(filepath.Join(dir, "kustomization.yaml")), obj: roundTrip(t, m)})
	}
	return out
}

// kustomizationResources are the entries of a kustomization's resources.
func kustomizationResources(t testing.TB, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("%s: %v", rel(dir), err)
	}
	return k.Resources
}

// exampleFiles lists every YAML file under examples/, sorted.
func exampleFiles(t testing.TB) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(examplesDir(), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && isYAML(d.Name()) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

// exampleObjects is every object the examples ship: a directory with a
// kustomization.yaml is rendered (its files are what it lists; a YAML file it
// does not list is an error, being untested and unapplied, except templates),
// every other YAML file is read document by document.
func exampleObjects(t testing.TB) []object {
	t.Helper()
	var out []object
	rendered := map[string]bool{}
	for _, f := range exampleFiles(t) {
		dir, name := filepath.Dir(f), filepath.Base(f)
		if _, err := os.Stat(filepath.Join(dir, "kustomization.yaml")); err != nil {
			out = append(out, readDocs(t, f)...)
			continue
		}
		if !rendered[dir] {
			rendered[dir] = true
			out = append(out, kustomizeBuild(t, dir)...)
		}
		switch {
		case name == "kustomization.yaml":
		case isTemplate(name):
			out = append(out, readDocs(t, f)...)
		default:
			listed := false
			for _, r := range kustomizationResources(t, dir) {
				listed = listed || r == name
			}
			if !listed {
				t.Errorf("%s is not in the resources of %s/kustomization.yaml: `kubectl apply -k` would skip it (name it *.template.yaml if it is a template to copy)", rel(f), rel(dir))
			}
		}
	}
	return out
}

// objectsUnder filters objects by the directory of their file (relative to
// examples/).
func objectsUnder(objs []object, dir string) []object {
	var out []object
	prefix := "examples/" + strings.TrimSuffix(dir, "/") + "/"
	for _, o := range objs {
		if strings.HasPrefix(o.file, prefix) {
			out = append(out, o)
		}
	}
	return out
}

func byKind(objs []object, kind string) []object {
	var out []object
	for _, o := range objs {
		if o.kind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// roundTrip makes a value JSON-shaped (map[string]any, []any, float64, …).
func roundTrip(t testing.TB, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func field(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

func str(m map[string]any, path ...string) string {
	s, _ := field(m, path...).(string)
	return s
}

func list(m map[string]any, path ...string) []map[string]any {
	l, _ := field(m, path...).([]any)
	var out []map[string]any
	for _, e := range l {
		if em, ok := e.(map[string]any); ok {
			out = append(out, em)
		}
	}
	return out
}

func stringList(m map[string]any, path ...string) []string {
	l, _ := field(m, path...).([]any)
	var out []string
	for _, e := range l {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
