package inputs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestInputsDocumented cross-checks the inputs the binary reads (All),
// action.yml (each input declared with the same default and description,
// and passed to the binary as INPUT_<NAME>) and the README's table.
func TestInputsDocumented(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "action.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var action struct {
		Inputs map[string]struct {
			Description string `json:"description"`
			Default     string `json:"default"`
		} `json:"inputs"`
		Runs struct {
			Using string `json:"using"`
			Steps []struct {
				ID  string            `json:"id"`
				Run string            `json:"run"`
				Env map[string]string `json:"env"`
			} `json:"steps"`
		} `json:"runs"`
	}
	if err := yaml.Unmarshal(raw, &action); err != nil {
		t.Fatal(err)
	}
	var env map[string]string
	for _, s := range action.Runs.Steps {
		if strings.Contains(s.Run, "stackflow-preview") && s.ID == "preview" {
			env = s.Env
		}
	}
	if action.Runs.Using != "composite" || env == nil {
		t.Fatalf("action.yml: no composite step running stackflow-preview with env")
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\|\\s*(.*?)\\s*\\| (.*) \\|$").FindAllStringSubmatch(string(readme), -1) {
		rows[m[1]] = []string{strings.Trim(m[2], "`"), m[3]}
	}
	seen := map[string]bool{}
	for _, in := range All {
		seen[in.Name] = true
		a, ok := action.Inputs[in.Name]
		if !ok {
			t.Errorf("input %s: not in action.yml", in.Name)
			continue
		}
		if a.Default != in.Default || a.Description != in.Description {
			t.Errorf("input %s: action.yml says default %q, %q; the binary %q, %q", in.Name, a.Default, a.Description, in.Default, in.Description)
		}
		if want := "${{ inputs." + in.Name + " }}"; env[EnvName(in.Name)] != want {
			t.Errorf("input %s: action.yml passes %s=%q, want %q", in.Name, EnvName(in.Name), env[EnvName(in.Name)], want)
		}
		row, ok := rows[in.Name]
		if !ok {
			t.Errorf("input %s: no row in the README's inputs table", in.Name)
			continue
		}
		if row[0] != in.Default || row[1] != in.Description {
			t.Errorf("input %s: the README says %q, %q; the binary %q, %q", in.Name, row[0], row[1], in.Default, in.Description)
		}
	}
	for name := range action.Inputs {
		if !seen[name] {
			t.Errorf("action.yml declares input %s, which the binary does not read", name)
		}
	}
	for name := range env {
		if strings.HasPrefix(name, "INPUT_") && !seen[strings.ToLower(strings.TrimPrefix(name, "INPUT_"))] {
			t.Errorf("action.yml passes %s, which the binary does not read", name)
		}
	}
}
