package install

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// chartDir is the chart under test.
func chartDir() string { return filepath.Join(substrate.RepoRoot(), "operator", "charts", "stackflow") }

var (
	rendererOnce sync.Once
	renderer     string
	rendererErr  error
)

// helmRender builds hack/tools/helm once per test binary (the Go build cache
// makes it quick after the first time) and returns the binary.
func helmRender(t *testing.T) string {
	t.Helper()
	rendererOnce.Do(func() {
		dir, err := os.MkdirTemp("", "helm-render-")
		if err != nil {
			rendererErr = err
			return
		}
		renderer = filepath.Join(dir, "helm-render")
		build := exec.Command("go", "build", "-o", renderer, ".")
		build.Dir = filepath.Join(substrate.RepoRoot(), "hack", "tools", "helm")
		if out, err := build.CombinedOutput(); err != nil {
			rendererErr = fmt.Errorf("build hack/tools/helm: %w\n%s", err, out)
		}
	})
	if rendererErr != nil {
		t.Fatal(rendererErr)
	}
	return renderer
}

// render renders the chart as release in namespace with values (a YAML
// document; "" for the defaults), with the CRDs when crds.
func render(t *testing.T, release, namespace, values string, crds bool) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"--chart", chartDir(), "--release", release, "--namespace", namespace}
	if values != "" {
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--values", f)
	}
	if crds {
		args = append(args, "--include-crds")
	}
	cmd := exec.Command(helmRender(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("render the chart with values\n%s\n%v: %s", values, err, stderr.String())
	}
	return decode(t, out)
}

// renderErr renders and returns the renderer's error output, for values the
// chart must refuse.
func renderErr(t *testing.T, values string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(helmRender(t), "--chart", chartDir(), "--values", f).CombinedOutput()
	if err == nil {
		t.Fatalf("values\n%s\nrendered, want an error", values)
	}
	return string(out)
}

// decode reads a YAML stream into objects, through JSON so numbers are int64
// as the API machinery (and kustomize's output) has them.
func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		if s := strings.TrimSpace(string(j)); s == "null" || s == "" {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(j); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		objs = append(objs, o)
	}
}

// kustomize builds a kustomization directory as `kubectl apply -k` would.
func kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		raw, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(raw); err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}

// id is kind/namespace/name (kind/name when cluster-scoped).
func id(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetKind() + "/" + o.GetName()
	}
	return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
}

// byID indexes objects by id; a duplicate fails the test.
func byID(t *testing.T, objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	m := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if _, dup := m[id(o)]; dup {
			t.Fatalf("%s twice", id(o))
		}
		m[id(o)] = o
	}
	return m
}

func ids(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, id(o))
	}
	sort.Strings(out)
	return out
}

// find returns the object with id, failing the test when there is none.
func find(t *testing.T, objs []*unstructured.Unstructured, want string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if id(o) == want {
			return o
		}
	}
	t.Fatalf("no %s in\n  %s", want, strings.Join(ids(objs), "\n  "))
	return nil
}

func has(objs []*unstructured.Unstructured, want string) bool {
	for _, o := range objs {
		if id(o) == want {
			return true
		}
	}
	return false
}
