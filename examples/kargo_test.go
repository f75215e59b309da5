package examples

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/stackflow-io/stackflow/kargo-steps/kargoexpr"
	"github.com/stackflow-io/stackflow/operator/test/substrate"
)

const (
	kargoProject = "kargo-demo"
	// freightSHA is the program commit of the simulated Freight; all digits,
	// so that a missing quote() would turn it into a number.
	freightSHA = "1234567890123456789012345678901234567890"
	pushSHA    = "c0ffee00000000000000000000000000000000aa"
	mergeSHA   = "beef0000000000000000000000000000000000bb"
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

func varsOf(m map[string]any, path ...string) []kargoexpr.Var {
	var out []kargoexpr.Var
	for _, v := range list(m, path...) {
		out = append(out, kargoexpr.Var{Name: str(v, "name"), Value: str(v, "value")})
	}
	return out
}

func varValue(vs []kargoexpr.Var, name string) string {
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
// reference to one of Stackflow's ClusterPromotionTasks, gives every var the
// task has no default for (Kargo fails the Promotion with "missing value for
// variable" otherwise), and passes only vars the task knows.
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
		promoVars := append(varsOf(st.obj, "spec", "vars"), varsOf(st.obj, "spec", "promotionTemplate", "spec", "vars")...)
		for i, ref := range steps {
			name, kind := str(ref, "task", "name"), str(ref, "task", "kind")
			task, ok := tasks[name]
			if kind != "ClusterPromotionTask" || !ok {
				t.Errorf("%s: step %d uses %v, want one of Stackflow's ClusterPromotionTasks %v", st, i+1, field(ref, "task"), keys(tasks))
				continue
			}
			if _, err := kargoexpr.ResolveTaskVars(varsOf(task, "spec", "vars"), promoVars, varsOf(ref, "vars")); err != nil {
				t.Errorf("%s: task %s: %v", st, name, err)
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

// stepSchema compiles Kargo's JSON schema of a built-in step's config.
func stepSchema(t testing.TB, step string) *jsonschema.Schema {
	t.Helper()
	path, err := filepath.Abs(filepath.Join(kargoDir(), "step-schemas", step+"-config.json"))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.AssertFormat = true
	s, err := c.Compile("file://" + filepath.ToSlash(path))
	if err != nil {
		t.Fatalf("step %s: no usable schema in Kargo v1.11.2 (not a built-in step?): %v", step, err)
	}
	return s
}

// stepOutput is what a step reports, as Kargo documents it (the values are
// the simulation's).
func stepOutput(t testing.TB, uses string, cfg map[string]any, promotion string) map[string]any {
	switch uses {
	case "git-push":
		branch, _ := cfg["targetBranch"].(string)
		if cfg["generateTargetBranch"] == true {
			branch = "kargo/promotion/" + promotion
		}
		return map[string]any{"commit": pushSHA, "branch": branch}
	case "git-commit":
		return map[string]any{"commit": pushSHA}
	case "git-open-pr":
		return map[string]any{"pr": map[string]any{"id": int64(7), "url": "https://github.com/example-org/kargo-demo-manifests/pull/7"}}
	case "git-wait-for-pr":
		return map[string]any{"pr": map[string]any{"id": int64(7), "merged": true}, "commit": mergeSHA}
	case "http":
		env, err := kargoexpr.HTTPEnv(200, http.Header{"Content-Type": {"application/json"}},
			[]byte(`{"phase":"Succeeded","reason":"UpdateSucceeded","update":{"name":"web-3","permalink":"https://app.pulumi.com/example-org/web/dev/updates/3"}}`), "")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]any{}
		for _, o := range list(cfg, "outputs") {
			v, err := kargoexpr.EvalPlain(str(o, "fromExpression"), env)
			if err != nil {
				t.Fatalf("http output %s: %v", str(o, "name"), err)
			}
			out[str(o, "name")] = v
		}
		return out
	case "compose-output":
		return cfg
	}
	return map[string]any{}
}

// stepRun is one evaluated task step of a simulated Promotion.
type stepRun struct {
	uses    string
	skipped bool
	config  map[string]any
}

// promote runs a Stage's promotion template the way Kargo inflates and
// evaluates it, without executing the steps: each task step's vars are
// resolved and evaluated, its `if` decides whether it runs, its config is
// evaluated with kargoexpr and validated against Kargo's schema of the step.
// It returns the steps by their alias in the task.
func promote(t *testing.T, st object, tasks map[string]map[string]any) map[string]stepRun {
	t.Helper()
	stage := st.name()
	promoVars := append(varsOf(st.obj, "spec", "vars"), varsOf(st.obj, "spec", "promotionTemplate", "spec", "vars")...)
	promotion := stage + ".01jf5e1wz8v3k6q2n9h4t7x0ab." + freightSHA[:7]
	commits := []kargoexpr.Commit{{RepoURL: varValue(varsOf(st.obj, "spec", "vars"), "repoURL"), ID: freightSHA, Branch: "main", Origin: "infra"}}
	outputs := map[string]any{}
	var statuses []kargoexpr.StepStatus
	runs := map[string]stepRun{}
	for _, ref := range list(st.obj, "spec", "promotionTemplate", "spec", "steps") {
		task := tasks[str(ref, "task", "name")]
		if task == nil {
			t.Fatalf("%s: no task %v", st, field(ref, "task"))
		}
		resolved, err := kargoexpr.ResolveTaskVars(varsOf(task, "spec", "vars"), promoVars, varsOf(ref, "vars"))
		if err != nil {
			t.Fatalf("%s: %v", st, err)
		}
		for _, s := range list(task, "spec", "steps") {
			alias := str(ref, "as") + kargoexpr.AliasSeparator + str(s, "as")
			env := &kargoexpr.Env{
				Project: kargoProject, Stage: stage, Promotion: promotion,
				TargetFreight: kargoexpr.FreightRef{Name: "a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0", Alias: "happy-fox", Origin: "infra"},
				StepAlias:     alias, Outputs: outputs, Commits: commits, Steps: statuses,
				Secrets: map[string]map[string]string{"stackflow-verifier-token": {"token": "sa-token"}},
			}
			if err := env.EvaluateVars(promoVars, append(append([]kargoexpr.Var{}, resolved...), varsOf(s, "vars")...)); err != nil {
				t.Fatalf("%s: %s: %v", st, alias, err)
			}
			run, err := env.If(str(s, "if"))
			if err != nil {
				t.Fatalf("%s: %s: if: %v", st, alias, err)
			}
			r := stepRun{uses: str(s, "uses")}
			if !run {
				r.skipped = true
				statuses = append(statuses, kargoexpr.StepStatus{Alias: alias, Status: "Skipped"})
				runs[str(s, "as")] = r
				continue
			}
			ev, err := env.Evaluate(field(s, "config"))
			if err != nil {
				t.Fatalf("%s: %s: config: %v", st, alias, err)
			}
			r.config = roundTrip(t, ev)
			if err := stepSchema(t, r.uses).Validate(any(r.config)); err != nil {
				t.Errorf("%s: step %s (%s): the evaluated config does not match Kargo's schema: %v", st, alias, r.uses, err)
			}
			outputs[alias] = stepOutput(t, r.uses, r.config, promotion)
			statuses = append(statuses, kargoexpr.StepStatus{Alias: alias, Status: "Succeeded"})
			runs[str(s, "as")] = r
		}
	}
	return runs
}

// TestKargoPromotions simulates each Stage's promotion and checks that it
// would edit the right file of the Kargo example's manifests tree, sync the
// right Application and wait for the right Stack and operation.
func TestKargoPromotions(t *testing.T) {
	tasks := shippedTasks(t)
	objs := exampleObjects(t)
	apps := map[string]object{}
	for _, a := range byKind(objectsUnder(objs, "kargo"), "Application") {
		apps[a.name()] = a
	}
	for _, st := range byKind(objectsUnder(objs, "kargo"), "Stage") {
		t.Run(st.name(), func(t *testing.T) {
			runs := promote(t, st, tasks)
			vars := varsOf(st.obj, "spec", "vars")
			stackNS, stackName := varValue(vars, "stackNamespace"), varValue(vars, "stackName")

			// yaml-update edits ./manifests/<stackFile>: a file of
			// examples/kargo/manifests whose FIRST document is that Stack,
			// with a spec.commit key.
			upd := runs["update-stack"]
			path, _ := upd.config["path"].(string)
			file := strings.TrimPrefix(path, "./manifests/")
			stackPath := filepath.Join(examplesDir(), "kargo", "manifests", filepath.FromSlash(file))
			if _, err := os.Stat(stackPath); err != nil {
				t.Fatalf("stackFile %s: no such file in examples/kargo/manifests (yaml-update would fail): %v", file, err)
			}
			docs := readDocs(t, stackPath)
			if len(docs) == 0 || docs[0].doc != 1 || docs[0].kind() != "Stack" {
				t.Fatalf("stackFile %s: the Stack must be the file's first document (Kargo's yaml-update edits only that one)", file)
			}
			stack := docs[0]
			if stack.name() != stackName || stack.namespace() != stackNS {
				t.Errorf("stackFile %s holds Stack %s/%s, the Stage's vars say %s/%s", file, stack.namespace(), stack.name(), stackNS, stackName)
			}
			if _, ok := field(stack.obj, "spec").(map[string]any)["commit"]; !ok {
				t.Errorf("%s: Stack %s has no spec.commit: yaml-update edits only keys that exist", file, stack.name())
			}
			if got := field(upd.config, "updates"); !reflect.DeepEqual(got, []any{map[string]any{"key": "spec.commit", "value": freightSHA}}) {
				t.Errorf("yaml-update updates %v, want spec.commit = %s", got, freightSHA)
			}

			// argocd-update syncs an Application of examples/kargo/argocd
			// that authorizes this Stage, whose source is the manifests
			// repository and whose path holds the stackFile.
			sync := runs["sync"]
			if sync.skipped {
				t.Fatal("argocd-update is skipped: set argocdApp")
			}
			want := list(sync.config, "apps")
			if len(want) != 1 {
				t.Fatalf("argocd-update apps %v", want)
			}
			app, ok := apps[str(want[0], "name")]
			if !ok || str(want[0], "namespace") != app.namespace() {
				t.Fatalf("argocd-update syncs %s/%s: no such Application in examples/kargo", str(want[0], "namespace"), str(want[0], "name"))
			}
			if got := str(app.obj, "metadata", "annotations", "kargo.akuity.io/authorized-stage"); got != kargoProject+":"+st.name() {
				t.Errorf("%s: authorized-stage %q, want %s:%s", app, got, kargoProject, st.name())
			}
			srcs := list(want[0], "sources")
			if len(srcs) != 1 || str(srcs[0], "repoURL") != str(app.obj, "spec", "source", "repoURL") {
				t.Errorf("argocd-update sources %v do not match %s's source %s", srcs, app.name(), str(app.obj, "spec", "source", "repoURL"))
			}
			if p := str(app.obj, "spec", "source", "path"); filepath.Dir(file) != p {
				t.Errorf("%s syncs path %s, the stackFile is %s", app.name(), p, file)
			}
			if ns := str(app.obj, "spec", "destination", "namespace"); ns != stackNS {
				t.Errorf("%s deploys to %s, the Stack lives in %s", app.name(), ns, stackNS)
			}
			if str(app.obj, "spec", "source", "repoURL") != str(runs["clone"].config, "repoURL") {
				t.Errorf("the promotion clones %s, %s syncs %s", str(runs["clone"].config, "repoURL"), app.name(), str(app.obj, "spec", "source", "repoURL"))
			}

			// The wait asks about that Stack, for the operation it runs.
			verify := runs["verify"]
			wantURL := fmt.Sprintf("http://stackflow-analysis.stackflow-system.svc:8080/v1/namespaces/%s/stacks/%s/verification", stackNS, stackName)
			if verify.config["url"] != wantURL {
				t.Errorf("http url %v, want %s", verify.config["url"], wantURL)
			}
			op := "up"
			if field(stack.obj, "spec", "preview") == true {
				op = "preview"
			}
			if got := field(verify.config, "queryParams"); !reflect.DeepEqual(got, []any{map[string]any{"name": "commit", "value": freightSHA}, map[string]any{"name": "operation", "value": op}}) {
				t.Errorf("http queryParams %v, want commit=%s operation=%s", got, freightSHA, op)
			}
		})
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
