package install

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestReadmeListsEveryValue: the chart README's table has a row for every
// value of values.yaml (a map value such as operator.resources has one row for
// itself, or one per key), and no row for a value that does not exist.
func TestReadmeListsEveryValue(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(chartDir(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "| `") {
			rows[strings.SplitN(strings.TrimPrefix(line, "| `"), "`", 2)[0]] = true
		}
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	var missing []string
	listed := map[string]bool{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			p := prefix + k
			if rows[p] {
				listed[p] = true
				continue
			}
			if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
				walk(p+".", sub)
				continue
			}
			missing = append(missing, p)
		}
	}
	walk("", values)
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the chart README's values table lacks %s", strings.Join(missing, ", "))
	}
	for r := range rows {
		if !listed[r] {
			t.Errorf("the chart README lists %s, which values.yaml does not have", r)
		}
	}
}
