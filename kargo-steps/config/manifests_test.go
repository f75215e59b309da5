package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/stackflow-io/stackflow/kargo-steps/kargoexpr"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// kargoDir is Kargo's reference data: CRDs and step schemas.
func kargoDir() string {
	// The shared Kargo reference data: the parent of its source
	// (../shared/kargo beside the repository root, or $STACKFLOW_KARGO_SRC/..).
	return filepath.Dir(substrate.KargoSource())
}

func configDir() string {
	return filepath.Join(substrate.RepoRoot(), "kargo-steps", "config")
}

// build runs kustomize on one of the config directories.
func build(t testing.TB, dir string) []map[string]any {
	t.Helper()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(configDir(), dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var out []map[string]any
	for _, r := range rm.Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, roundTrip(t, m))
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

// shipped is every Kargo object this directory ships, by directory.
func shipped(t testing.TB) map[string][]map[string]any {
	return map[string][]map[string]any{
		"tasks":      build(t, "tasks"),
		"namespaced": build(t, "namespaced"),
		"stages":     build(t, "stages"),
	}
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

func vars(m map[string]any, path ...string) []kargoexpr.Var {
	var out []kargoexpr.Var
	for _, v := range list(m, path...) {
		out = append(out, kargoexpr.Var{Name: str(v, "name"), Value: str(v, "value")})
	}
	return out
}

// TestKustomizationsListEveryFile: every YAML file of a directory is either
// its kustomization or one of its resources, so nothing is shipped untested.
func TestKustomizationsListEveryFile(t *testing.T) {
	for _, dir := range []string{"tasks", "stages"} {
		files, err := filepath.Glob(filepath.Join(configDir(), dir, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(configDir(), dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k struct {
			Resources []string `json:"resources"`
		}
		if err := yaml.Unmarshal(b, &k); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range files {
			if n := filepath.Base(f); n != "kustomization.yaml" {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		sort.Strings(k.Resources)
		if !reflect.DeepEqual(names, k.Resources) {
			t.Errorf("%s: files %v, kustomization resources %v", dir, names, k.Resources)
		}
	}
}

// TestYAMLFilesAreCommented: every YAML file starts with a comment.
func TestYAMLFilesAreCommented(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(configDir(), "*", "*.yaml"))
	if len(files) < 7 {
		t.Fatalf("only %d YAML files", len(files))
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if !strings.HasPrefix(string(b), "# ") {
			t.Errorf("%s does not start with a comment", f)
		}
	}
}

// TestNamespacedTasksAreTheClusterTasks: kustomize changed only kind and
// namespace.
func TestNamespacedTasksAreTheClusterTasks(t *testing.T) {
	cluster, namespaced := build(t, "tasks"), build(t, "namespaced")
	if len(cluster) != 2 || len(namespaced) != len(cluster) {
		t.Fatalf("%d cluster tasks, %d namespaced", len(cluster), len(namespaced))
	}
	byName := map[string]map[string]any{}
	for _, c := range cluster {
		if c["kind"] != "ClusterPromotionTask" || str(c, "metadata", "namespace") != "" {
			t.Errorf("cluster task %s: kind %v, namespace %q", str(c, "metadata", "name"), c["kind"], str(c, "metadata", "namespace"))
		}
		byName[str(c, "metadata", "name")] = c
	}
	for _, n := range namespaced {
		name := str(n, "metadata", "name")
		if n["kind"] != "PromotionTask" || str(n, "metadata", "namespace") != "kargo-demo" {
			t.Errorf("namespaced task %s: kind %v, namespace %q", name, n["kind"], str(n, "metadata", "namespace"))
		}
		c := roundTrip(t, byName[name])
		c["kind"] = "PromotionTask"
		c["metadata"].(map[string]any)["namespace"] = "kargo-demo"
		if !reflect.DeepEqual(c, n) {
			t.Errorf("namespaced %s differs from the cluster task beyond kind and namespace", name)
		}
	}
}

// TestTaskShape: the contract the tasks must keep: names, vars and their
// defaults, the steps in order, retry.timeout a plain duration.
func TestTaskShape(t *testing.T) {
	wantSteps := map[string][]string{
		"stackflow-promote": {"fail", "git-clone", "yaml-parse", "fail", "yaml-update", "git-commit", "git-push", "argocd-update",
			"compose-output", "http", "http", "http", "compose-output"},
		"stackflow-promote-pr": {"fail", "git-clone", "yaml-parse", "fail", "yaml-update", "git-commit", "git-push", "git-open-pr",
			"git-wait-for-pr", "argocd-update", "compose-output", "http", "http", "http", "compose-output"},
	}
	wantVars := map[string]string{
		"repoURL": "", "manifestsRepoURL": "", "manifestsBranch": "main", "stackFile": "",
		"stackNamespace": "", "stackName": "", "operation": "up",
		"analysisURL": "http://stackflow-analysis.stackflow-system.svc:8080", "tokenSecret": "stackflow-verifier-token",
		"argocdNamespace": "argocd", "stackNotFoundGrace": "5m",
	}
	for _, task := range build(t, "tasks") {
		name := str(task, "metadata", "name")
		got := map[string]string{}
		for _, v := range vars(task, "spec", "vars") {
			got[v.Name] = v.Value
		}
		if !reflect.DeepEqual(got, wantVars) {
			t.Errorf("%s: vars %v, want %v", name, got, wantVars)
		}
		var uses []string
		for _, s := range list(task, "spec", "steps") {
			uses = append(uses, str(s, "uses"))
			if as := str(s, "as"); as == "" || strings.HasPrefix(as, "step-") || strings.HasPrefix(as, "task-") {
				t.Errorf("%s: step %s has alias %q (missing or reserved)", name, str(s, "uses"), as)
			}
			// retry.timeout is a metav1.Duration in Kargo's Go types: it is
			// decoded before expressions are evaluated, so it must be a plain
			// duration.
			if to, ok := field(s, "retry", "timeout").(string); ok {
				if _, err := time.ParseDuration(to); err != nil {
					t.Errorf("%s: step %s: retry.timeout %q is not a duration: %v", name, str(s, "as"), to, err)
				}
			}
			if str(s, "uses") == "http" && str(s, "retry", "timeout") == "" {
				t.Errorf("%s: the http step has no retry.timeout: it would poll forever", name)
			}
		}
		if !reflect.DeepEqual(uses, wantSteps[name]) {
			t.Errorf("%s: steps %v, want %v", name, uses, wantSteps[name])
		}
	}
	// The steps the two tasks share are the same (the http step's live test
	// runs stackflow-promote's).
	steps := map[string]map[string]any{}
	shared := map[string]bool{"check-grace": true, "clone": true, "stack-file": true, "check-stack-file": true, "update-stack": true,
		"commit": true, "grace": true, "plan": true, "approval": true, "verify": true}
	for _, task := range build(t, "tasks") {
		for _, s := range list(task, "spec", "steps") {
			key := str(s, "as")
			if prev, ok := steps[key]; ok && shared[key] && !reflect.DeepEqual(prev, s) {
				t.Errorf("step %s differs between the tasks", key)
			}
			steps[key] = s
		}
	}
}
