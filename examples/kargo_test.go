package examples

import (
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

const (
	kargoProject = "kargo-demo"
	// freightSHA is a program commit for the verification template's test;
	// all digits, as a commit that a careless template would make a number.
	freightSHA = "1234567890123456789012345678901234567890"
)

func kargoObjects(t testing.TB) []object { return objectsUnder(exampleObjects(t), "kargo") }

// shippedTasks are Stackflow's ClusterPromotionTasks, by name, as kubectl
// apply -k kargo-steps/config/tasks installs them.
func shippedTasks(t testing.TB) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, o := range kustomizeBuild(t, filepath.Join(substrate.RepoRoot(), "kargo-steps", "config", "tasks")) {
		if o.kind() != "ClusterPromotionTask" {
			t.Fatalf("%s: not a ClusterPromotionTask", o)
		}
		out[o.name()] = o.obj
	}
	if len(out) == 0 {
		t.Fatal("kargo-steps/config/tasks has no ClusterPromotionTask")
	}
	return out
}

// kvar is a Kargo var (name, value) of a Stage, task or task reference.
type kvar struct{ Name, Value string }

func varsOf(m map[string]any, path ...string) []kvar {
	var out []kvar
	for _, v := range list(m, path...) {
		out = append(out, kvar{Name: str(v, "name"), Value: str(v, "value")})
	}
	return out
}

func varValue(vs []kvar, name string) string {
	for _, v := range vs {
		if v.Name == name {
			return v.Value
		}
	}
	return ""
}

var varUse = regexp.MustCompile(`vars\.([A-Za-z_][A-Za-z0-9_]*)`)

// taskVarNames are the vars a task knows: those it declares and those its
// steps read (argocdApp is read but deliberately not declared: an optional
// var cannot have an empty default in Kargo).
func taskVarNames(t testing.TB, task map[string]any) map[string]bool {
	names := map[string]bool{}
	for _, v := range varsOf(task, "spec", "vars") {
		names[v.Name] = true
	}
	for _, m := range varUse.FindAllStringSubmatch(string(mustJSON(t, field(task, "spec", "steps"))), -1) {
		names[m[1]] = true
	}
	return names
}

// TestKargoStagesUseShippedTasks: every promotion step of every Stage is a
// reference to one of Stackflow's ClusterPromotionTasks and passes only vars
// the task knows (Kargo ignores the others: a misspelt var would be lost
// silently). That each Stage gives every var the task needs, and the rest of
// each promotion, is shown by the real Kargo promoting this example
// (operator/test/kargoe2e).
func TestKargoStagesUseShippedTasks(t *testing.T) {
	tasks := shippedTasks(t)
	stages := byKind(kargoObjects(t), "Stage")
	if len(stages) != 4 {
		t.Fatalf("%d Stages, want 4 (dev, preview, test, prod)", len(stages))
	}
	for _, st := range stages {
		steps := list(st.obj, "spec", "promotionTemplate", "spec", "steps")
		if len(steps) == 0 {
			t.Errorf("%s: no promotion steps", st)
		}
		for i, ref := range steps {
			name, kind := str(ref, "task", "name"), str(ref, "task", "kind")
			task, ok := tasks[name]
			if kind != "ClusterPromotionTask" || !ok {
				t.Errorf("%s: step %d uses %v, want one of Stackflow's ClusterPromotionTasks %v", st, i+1, field(ref, "task"), keys(tasks))
				continue
			}
			known := taskVarNames(t, task)
			for _, v := range append(varsOf(ref, "vars"), varsOf(st.obj, "spec", "vars")...) {
				if !known[v.Name] {
					t.Errorf("%s: var %s is not a var of the task %s (it knows %v)", st, v.Name, name, keys(known))
				}
			}
		}
	}
}

// TestKargoFreightFlow: the Warehouse subscribes to the Stages' repoURL
// (commitFrom(vars.repoURL) finds nothing otherwise) with the subscription
// fields Kargo documents; dev and preview take Freight from it directly and
// are auto-promoted; test takes only Freight verified in both; prod only
// Freight verified in test, through a pull request.
func TestKargoFreightFlow(t *testing.T) {
	objs := kargoObjects(t)
	whs := byKind(objs, "Warehouse")
	if len(whs) != 1 {
		t.Fatalf("%d Warehouses, want 1", len(whs))
	}
	wh := whs[0]
	if d, err := time.ParseDuration(str(wh.obj, "spec", "interval")); err != nil || d <= 0 {
		t.Errorf("%s: interval %q: %v", wh, str(wh.obj, "spec", "interval"), err)
	}
	subs := list(wh.obj, "spec", "subscriptions")
	if len(subs) != 1 || field(subs[0], "git") == nil {
		t.Fatalf("%s: subscriptions %v, want one git subscription", wh, subs)
	}
	git := field(subs[0], "git").(map[string]any)
	// The CRD does not validate subscriptions (x-kubernetes-preserve-unknown-fields):
	// check the fields against Kargo's documented git subscription.
	documented := map[string]bool{"repoURL": true, "branch": true, "commitSelectionStrategy": true, "includePaths": true, "excludePaths": true, "discoveryLimit": true}
	for k := range git {
		if !documented[k] {
			t.Errorf("%s: git subscription field %q is not one of Kargo's %v", wh, k, keys(documented))
		}
	}
	if !reflect.DeepEqual(stringList(git, "includePaths"), []string{"programs/web"}) {
		t.Errorf("%s: includePaths %v, want [programs/web]", wh, git["includePaths"])
	}
	stages := map[string]object{}
	for _, st := range byKind(objs, "Stage") {
		stages[st.name()] = st
		if got := varValue(varsOf(st.obj, "spec", "vars"), "repoURL"); got != git["repoURL"] {
			t.Errorf("%s: repoURL var %q, the Warehouse subscribes to %q", st, got, git["repoURL"])
		}
		rf := list(st.obj, "spec", "requestedFreight")
		if len(rf) != 1 || str(rf[0], "origin", "kind") != "Warehouse" || str(rf[0], "origin", "name") != wh.name() {
			t.Errorf("%s: requestedFreight %v, want Freight of the Warehouse %s", st, rf, wh.name())
		}
	}
	sources := func(stage string) (direct bool, upstream []string, strategy string) {
		rf := list(stages[stage].obj, "spec", "requestedFreight")
		if len(rf) == 0 {
			return false, nil, ""
		}
		d, _ := field(rf[0], "sources", "direct").(bool)
		up := stringList(rf[0], "sources", "stages")
		sort.Strings(up)
		return d, up, str(rf[0], "sources", "availabilityStrategy")
	}
	for _, tt := range []struct {
		stage    string
		direct   bool
		upstream []string
		strategy string
		task     string
	}{
		{"dev", true, nil, "", "stackflow-promote"},
		{"preview", true, nil, "", "stackflow-promote"},
		{"test", false, []string{"dev", "preview"}, "All", "stackflow-promote"},
		{"prod", false, []string{"test"}, "", "stackflow-promote-pr"},
	} {
		if _, ok := stages[tt.stage]; !ok {
			t.Errorf("no Stage %s", tt.stage)
			continue
		}
		d, up, strategy := sources(tt.stage)
		if d != tt.direct || !reflect.DeepEqual(up, tt.upstream) || strategy != tt.strategy {
			t.Errorf("Stage %s: direct %v, upstream %v, availabilityStrategy %q; want %v, %v, %q", tt.stage, d, up, strategy, tt.direct, tt.upstream, tt.strategy)
		}
		if got := str(list(stages[tt.stage].obj, "spec", "promotionTemplate", "spec", "steps")[0], "task", "name"); got != tt.task {
			t.Errorf("Stage %s promotes with %s, want %s", tt.stage, got, tt.task)
		}
	}
	// Auto-promotion: dev and preview, nothing else.
	pcs := byKind(objs, "ProjectConfig")
	if len(pcs) != 1 || pcs[0].name() != kargoProject || pcs[0].namespace() != kargoProject {
		t.Fatalf("ProjectConfigs %v, want one named %s in %s", pcs, kargoProject, kargoProject)
	}
	auto := map[string]bool{}
	for _, p := range list(pcs[0].obj, "spec", "promotionPolicies") {
		name := str(p, "stageSelector", "name")
		if _, ok := stages[name]; !ok {
			t.Errorf("%s: a promotion policy for %q, which is no Stage", pcs[0], name)
		}
		auto[name], _ = p["autoPromotionEnabled"].(bool)
	}
	if !reflect.DeepEqual(auto, map[string]bool{"dev": true, "preview": true}) {
		t.Errorf("auto-promotion %v, want dev and preview only", auto)
	}
	projects := byKind(objs, "Project")
	if len(projects) != 1 || projects[0].name() != kargoProject {
		t.Errorf("Projects %v, want %s", projects, kargoProject)
	}
	// The project's objects (the kustomization) live in its namespace, but
	// the RoleBinding that lets the project verify the Stacks, which lives
	// in theirs.
	for _, o := range objs {
		if o.file != "examples/kargo/kustomization.yaml" {
			continue
		}
		if ns := o.namespace(); o.kind() != "RoleBinding" && ns != "" && ns != kargoProject {
			t.Errorf("%s: outside the project namespace %s", o, kargoProject)
		}
	}
}
