package argocdhealth

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	"github.com/argoproj/argo-cd/v2/util/lua"
	"github.com/argoproj/gitops-engine/pkg/health"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Helpers running the scripts through Argo CD's own Lua VM.

// fixture reads testdata/<rel> (YAML) as Argo CD's controller sees objects.
func fixture(t *testing.T, rel string) *unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return parseObject(t, b)
}

func parseObject(t *testing.T, b []byte) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		t.Fatal(err)
	}
	return u
}

// fixtures lists the YAML files under testdata/<dir>, as "<dir>/<name>.yaml".
func fixtures(t *testing.T, dir string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range paths {
		out = append(out, dir+"/"+filepath.Base(p))
	}
	sort.Strings(out)
	return out
}

func allFixtures(t *testing.T) []string {
	return append(fixtures(t, "captured"), fixtures(t, "hand")...)
}

func overrides(t *testing.T) map[string]v1alpha1.ResourceOverride {
	t.Helper()
	o, err := Overrides()
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// luaHealth runs obj's health script as Argo CD does (GetHealthScript, then
// ExecuteHealthLua with the override's useOpenLibs), or with openLibs forced
// to the given value.
func luaHealth(t *testing.T, obj *unstructured.Unstructured, openLibs *bool) *health.HealthStatus {
	t.Helper()
	vm := lua.VM{ResourceOverrides: overrides(t)}
	script, useOpenLibs, err := vm.GetHealthScript(obj)
	if err != nil || script == "" {
		t.Fatalf("no health script for %s: %v", obj.GroupVersionKind(), err)
	}
	vm.UseOpenLibs = useOpenLibs
	if openLibs != nil {
		vm.UseOpenLibs = *openLibs
	}
	h, err := vm.ExecuteHealthLua(obj, script)
	if err != nil {
		t.Fatalf("health script of %s failed: %v", obj.GroupVersionKind().Kind, err)
	}
	return h
}

// matches compares a message with want, exactly but for "{duration}", which
// matches any Go duration (captured messages say "retrying in 9s" or "10s"
// depending on the run's timing).
func matches(got, want string) bool {
	parts := strings.Split(want, "{duration}")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, `(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+`) + "$").MatchString(got)
}

func luaOverrides(o map[string]v1alpha1.ResourceOverride) lua.ResourceHealthOverrides {
	return lua.ResourceHealthOverrides(o)
}
