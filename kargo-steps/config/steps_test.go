package config

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/stackflow-io/stackflow/kargo-steps/kargoexpr"
)

const (
	programRepo = "https://github.com/example/infra.git"
	programSHA  = "3f2a9c1e0b4d5a6f7e8d9c0b1a2f3e4d5c6b7a89"
	// digitsSHA is a commit ID Kargo's templating would turn into a number
	// without quote().
	digitsSHA = "1234567890123456789012345678901234567890"
	pushSHA   = "c0ffee00000000000000000000000000000000aa"
	mergeSHA  = "beef0000000000000000000000000000000000bb"
	token     = "sa-token"
)

// stepSchemas loads the step config schemas of Kargo from their file URLs
// (so that their $refs to common.json and argocd-common.json resolve).
type stepSchemas struct {
	mu       sync.Mutex
	compiled map[string]*jsonschema.Schema
	docs     map[string]map[string]any
}

var schemas = &stepSchemas{compiled: map[string]*jsonschema.Schema{}, docs: map[string]map[string]any{}}

func schemaFile(name string) string {
	p, _ := filepath.Abs(filepath.Join(kargoDir(), "step-schemas", name))
	return p
}

func (s *stepSchemas) doc(t testing.TB, name string) map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.docs[name]; ok {
		return d
	}
	b, err := os.ReadFile(schemaFile(name))
	if err != nil {
		t.Fatalf("step schema %s: %v", name, err)
	}
	var d map[string]any
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("step schema %s: %v", name, err)
	}
	s.docs[name] = d
	return d
}

// schema compiles the config schema of a step; a step with no schema file
// fails the test (Kargo has no such built-in step).
func (s *stepSchemas) schema(t testing.TB, step string) *jsonschema.Schema {
	t.Helper()
	sch, err := s.compile(step)
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

func (s *stepSchemas) compile(step string) (*jsonschema.Schema, error) {
	name := step + "-config.json"
	if _, err := os.Stat(schemaFile(name)); err != nil {
		return nil, fmt.Errorf("step %q: Kargo v1.11.2 has no config schema for it (%v): not a built-in step", step, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.compiled[name]; ok {
		return c, nil
	}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.AssertFormat = true
	sch, err := c.Compile("file://" + filepath.ToSlash(schemaFile(name)))
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", name, err)
	}
	s.compiled[name] = sch
	return sch, nil
}

// resolve follows $ref (local "#/…" or "<file>#/…") from the document file.
func (s *stepSchemas) resolve(t testing.TB, file string, node map[string]any) (string, map[string]any) {
	for i := 0; i < 10; i++ {
		ref, ok := node["$ref"].(string)
		if !ok {
			return file, node
		}
		f, ptr, _ := strings.Cut(ref, "#")
		if f != "" {
			file = f
		}
		var cur any = s.doc(t, file)
		for _, p := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
			if p == "" {
				continue
			}
			cur = cur.(map[string]any)[p]
		}
		node = cur.(map[string]any)
	}
	t.Fatalf("$ref loop in %s", file)
	return "", nil
}

type prop struct {
	file string
	node map[string]any
}

// properties collects the properties a schema node declares, its own first,
// then those of its allOf/anyOf/oneOf branches.
func (s *stepSchemas) properties(t testing.TB, file string, node map[string]any) map[string]prop {
	file, node = s.resolve(t, file, node)
	out := map[string]prop{}
	if ps, ok := node["properties"].(map[string]any); ok {
		for k, v := range ps {
			out[k] = prop{file, v.(map[string]any)}
		}
	}
	for _, kw := range []string{"allOf", "anyOf", "oneOf"} {
		branches, _ := node[kw].([]any)
		for _, b := range branches {
			for k, v := range s.properties(t, file, b.(map[string]any)) {
				if _, ok := out[k]; !ok {
					out[k] = v
				}
			}
		}
	}
	return out
}

// unknownFields reports every field of value that its schema node does not
// declare, at any depth. A node declaring no properties (compose-output's
// config, yaml-update's value, matchLabels) is free-form.
func (s *stepSchemas) unknownFields(t testing.TB, file string, node map[string]any, value any, path string) []string {
	file, node = s.resolve(t, file, node)
	var out []string
	switch v := value.(type) {
	case map[string]any:
		props := s.properties(t, file, node)
		if len(props) == 0 {
			return nil
		}
		for k, fv := range v {
			p, ok := props[k]
			if !ok {
				out = append(out, path+"."+k)
				continue
			}
			out = append(out, s.unknownFields(t, p.file, p.node, fv, path+"."+k)...)
		}
	case []any:
		items, ok := node["items"].(map[string]any)
		if !ok {
			return nil
		}
		for i, e := range v {
			out = append(out, s.unknownFields(t, file, items, e, fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	sort.Strings(out)
	return out
}

// validate checks an evaluated step config against its step's schema and
// for fields the schema does not have.
func validate(t testing.TB, step string, cfg map[string]any) error {
	t.Helper()
	if err := schemas.schema(t, step).Validate(any(cfg)); err != nil {
		return err
	}
	name := step + "-config.json"
	if unknown := schemas.unknownFields(t, name, schemas.doc(t, name), cfg, "config"); len(unknown) > 0 {
		return fmt.Errorf("fields the %s schema does not have: %v", step, unknown)
	}
	return nil
}

// stepRun is what happened to one task step in a simulated Promotion.
type stepRun struct {
	alias   string
	uses    string
	skipped bool
	config  map[string]any
	output  map[string]any
	// status is Skipped, Succeeded, Failed (a fail step) or Errored (a
	// yaml-parse of a file that does not parse); err says why it errored.
	status string
	err    error
}

// promotion runs the promotion template of a Stage the way Kargo inflates and
// evaluates it, without executing the steps: each task step's vars are
// resolved and evaluated, its `if` decides whether it runs, its config is
// evaluated and validated against the step's schema, and its output is what
// Kargo's step documents (git-push: commit, branch; git-open-pr: pr.id,
// pr.url; git-wait-for-pr: commit; http: its outputs expressions over a
// Succeeded answer of stackflow-analysis; compose-output: its config;
// yaml-parse: its outputs over the file in files; fail: none, the step
// fails).
type promotion struct {
	stage       map[string]any
	tasks       map[string]map[string]any // by kind/name
	commits     []kargoexpr.Commit
	analysisURL string // overrides the task's default, when set
	// failBefore marks a task step (by alias) as failed after it ran.
	failBefore string
	// files are the manifests checkout's files, by path (as yaml-parse's
	// path gives it, ./manifests/<stackFile>). When nil, every file is the
	// Stack manifest of the step's vars stackNamespace and stackName.
	files map[string]string
	// answer is what every http step is answered (outputs, and the `if` of
	// the steps after them): succeeded when empty.
	answer string
}

// stackManifest is a Stack manifest as a manifests repository holds it.
func stackManifest(namespace, name string) string {
	return fmt.Sprintf(`# The Stack %s/%s.
apiVersion: pulumi.com/v1
kind: Stack
metadata:
  name: %s
  namespace: %s
spec:
  stack: dev
  projectRepo: https://github.com/example/infra.git
  commit: "0000000000000000000000000000000000000000"
`, namespace, name, name, namespace)
}

func (p *promotion) run(t *testing.T) ([]stepRun, error) {
	t.Helper()
	stageName := str(p.stage, "metadata", "name")
	promoVars := append(vars(p.stage, "spec", "vars"), vars(p.stage, "spec", "promotionTemplate", "spec", "vars")...)
	if p.analysisURL != "" {
		promoVars = append(promoVars, kargoexpr.Var{Name: "analysisURL", Value: p.analysisURL})
	}
	promoName := stageName + ".01jf5e1wz8v3k6q2n9h4t7x0ab.3f2a9c1"
	var runs []stepRun
	outputs := map[string]any{}
	var statuses []kargoexpr.StepStatus
	for _, ref := range list(p.stage, "spec", "promotionTemplate", "spec", "steps") {
		kind := str(ref, "task", "kind")
		if kind == "" {
			kind = "PromotionTask"
		}
		task, ok := p.tasks[kind+"/"+str(ref, "task", "name")]
		if !ok {
			return nil, fmt.Errorf("no %s %s", kind, str(ref, "task", "name"))
		}
		resolved, err := kargoexpr.ResolveTaskVars(vars(task, "spec", "vars"), promoVars, vars(ref, "vars"))
		if err != nil {
			return nil, err
		}
		for _, s := range list(task, "spec", "steps") {
			r := stepRun{alias: str(ref, "as") + kargoexpr.AliasSeparator + str(s, "as"), uses: str(s, "uses")}
			env := &kargoexpr.Env{
				Project: "kargo-demo", Stage: stageName, Promotion: promoName,
				TargetFreight: kargoexpr.FreightRef{Name: "a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0", Alias: "happy-fox"},
				StepAlias:     r.alias, Outputs: outputs, Commits: p.commits, Steps: statuses,
				Secrets: map[string]map[string]string{"stackflow-verifier-token": {"token": token, "namespace": "kargo-demo"}},
			}
			if err := env.EvaluateVars(promoVars, append(append([]kargoexpr.Var{}, resolved...), vars(s, "vars")...)); err != nil {
				return nil, fmt.Errorf("%s: %w", r.alias, err)
			}
			run, err := env.If(str(s, "if"))
			if err != nil {
				return nil, fmt.Errorf("%s: if: %w", r.alias, err)
			}
			if !run {
				r.skipped, r.status = true, "Skipped"
				statuses = append(statuses, kargoexpr.StepStatus{Alias: r.alias, Status: "Skipped"})
				runs = append(runs, r)
				continue
			}
			ev, err := env.Evaluate(field(s, "config"))
			if err != nil {
				return nil, fmt.Errorf("%s: config: %w", r.alias, err)
			}
			// Kargo marshals the evaluated config to JSON before the step
			// decodes it.
			r.config = roundTrip(t, ev)
			if err := validate(t, r.uses, r.config); err != nil {
				return nil, fmt.Errorf("%s (%s): %w", r.alias, r.uses, err)
			}
			r.status = "Succeeded"
			switch r.uses {
			case "fail":
				r.status = "Failed"
			case "yaml-parse":
				file, ok := p.files[str(r.config, "path")]
				if p.files == nil {
					file, ok = stackManifest(fmt.Sprint(env.Vars["stackNamespace"]), fmt.Sprint(env.Vars["stackName"])), true
				}
				if !ok {
					r.status, r.err = "Errored", fmt.Errorf("no file %s", str(r.config, "path"))
					break
				}
				exprs := map[string]string{}
				for _, o := range list(r.config, "outputs") {
					exprs[str(o, "name")] = str(o, "fromExpression")
				}
				if r.output, r.err = kargoexpr.YAMLParse([]byte(file), exprs); r.err != nil {
					r.status = "Errored"
				}
			default:
				r.output = p.output(t, r, promoName)
			}
			if r.output != nil {
				outputs[r.alias] = r.output
			}
			if str(s, "as") == p.failBefore {
				r.status = "Failed"
			}
			statuses = append(statuses, kargoexpr.StepStatus{Alias: r.alias, Status: r.status})
			runs = append(runs, r)
		}
	}
	return runs, nil
}

// succeeded is an answer of stackflow-analysis for a Succeeded verification
// (the live answers are tested in http_test.go).
const succeeded = `{"phase":"Succeeded","reason":"UpdateSucceeded","message":"up of 3f2a9c1 succeeded","operation":"up",
 "update":{"name":"web-7","type":"up","state":"succeeded","permalink":"https://app.pulumi.com/acme/web/dev/updates/7"}}`

func (p *promotion) output(t *testing.T, r stepRun, promoName string) map[string]any {
	switch r.uses {
	case "git-commit":
		return map[string]any{"commit": pushSHA}
	case "git-push":
		branch, _ := r.config["targetBranch"].(string)
		if r.config["generateTargetBranch"] == true {
			branch = "kargo/promotion/" + promoName
		}
		return map[string]any{"commit": pushSHA, "branch": branch}
	case "git-open-pr":
		return map[string]any{"pr": map[string]any{"id": int64(42), "url": "https://github.com/example/infra-manifests/pull/42"}}
	case "git-wait-for-pr":
		return map[string]any{"pr": map[string]any{"id": int64(42), "url": "https://github.com/example/infra-manifests/pull/42", "open": false, "merged": true}, "commit": mergeSHA}
	case "http":
		answer := p.answer
		if answer == "" {
			answer = succeeded
		}
		env, err := kargoexpr.HTTPEnv(200, http.Header{"Content-Type": {"application/json"}}, []byte(answer), "")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]any{}
		for _, o := range list(r.config, "outputs") {
			v, err := kargoexpr.EvalPlain(str(o, "fromExpression"), env)
			if err != nil {
				t.Fatalf("%s: output %s: %v", r.alias, str(o, "name"), err)
			}
			out[str(o, "name")] = v
		}
		return out
	case "compose-output":
		return r.config
	}
	return map[string]any{}
}

func allTasks(t *testing.T) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, dir := range []string{"tasks", "namespaced"} {
		for _, task := range build(t, dir) {
			out[task["kind"].(string)+"/"+str(task, "metadata", "name")] = task
		}
	}
	return out
}

func stage(t *testing.T, name string) map[string]any {
	for _, s := range build(t, "stages") {
		if str(s, "metadata", "name") == name {
			return s
		}
	}
	t.Fatalf("no Stage %s", name)
	return nil
}

func byAlias(runs []stepRun) map[string]stepRun {
	m := map[string]stepRun{}
	for _, r := range runs {
		m[strings.TrimPrefix(r.alias, "promote::")] = r
	}
	return m
}

// TestStageSnippetsPromote evaluates every step of every Stage snippet's task
// and validates its config against the step's schema, then checks what the
// steps would do.
func TestStageSnippetsPromote(t *testing.T) {
	tasks := allTasks(t)
	freight := []kargoexpr.Commit{{RepoURL: programRepo, ID: programSHA, Branch: "main", Message: "infra: add bucket"}}
	for _, tt := range []struct {
		stage, ns, file, op, manifestsCommit string
		pr, argocd                           bool
	}{
		{"dev", "dev", "stacks/dev/web.yaml", "up", pushSHA, false, true},
		{"prod", "prod", "stacks/prod/web.yaml", "up", mergeSHA, true, false},
		{"staging", "staging", "stacks/staging/web.yaml", "preview", pushSHA, false, false},
	} {
		t.Run(tt.stage, func(t *testing.T) {
			before := time.Now().UTC().Truncate(time.Second)
			runs, err := (&promotion{stage: stage(t, tt.stage), tasks: tasks, commits: freight}).run(t)
			if err != nil {
				t.Fatal(err)
			}
			after := time.Now().UTC()
			s := byAlias(runs)
			check := func(what string, got, want any) {
				t.Helper()
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s = %#v, want %#v", what, got, want)
				}
			}
			check("clone repoURL", s["clone"].config["repoURL"], "https://github.com/example/infra-manifests.git")
			check("clone checkout", s["clone"].config["checkout"], []any{map[string]any{"branch": "main", "path": "./manifests"}})
			check("yaml-update", s["update-stack"].config, map[string]any{"path": "./manifests/" + tt.file,
				"updates": []any{map[string]any{"key": "spec.commit", "value": programSHA}}})
			msg, _ := s["commit"].config["message"].(string)
			first, _, _ := strings.Cut(msg, "\n")
			check("commit message subject", first, fmt.Sprintf("%s: Stack %s/web to %s", tt.stage, tt.ns, programSHA[:7]))
			if !strings.Contains(msg, programSHA) {
				t.Errorf("commit message %q lacks the full SHA", msg)
			}
			if tt.pr {
				check("push", s["push"].config, map[string]any{"path": "./manifests", "generateTargetBranch": true})
				check("open-pr branches", []any{s["open-pr"].config["sourceBranch"], s["open-pr"].config["targetBranch"]},
					[]any{"kargo/promotion/prod.01jf5e1wz8v3k6q2n9h4t7x0ab.3f2a9c1", "main"})
				check("wait-for-pr prNumber", s["wait-for-pr"].config["prNumber"], float64(42))
			} else {
				check("push", s["push"].config, map[string]any{"path": "./manifests", "targetBranch": "main"})
			}
			if tt.argocd {
				// No desired revision: see the task's comment on argocd-update.
				check("argocd-update", s["sync"].config, map[string]any{"apps": []any{map[string]any{
					"name": "infra-dev", "namespace": "argocd",
				}}})
			} else if !s["sync"].skipped {
				t.Errorf("argocd-update ran without argocdApp: %v", s["sync"].config)
			}
			v := s["verify"].config
			check("http url", v["url"], "http://stackflow-analysis.stackflow-system.svc:8080/v1/namespaces/"+tt.ns+"/stacks/web/verification")
			check("http headers", v["headers"], []any{map[string]any{"name": "Authorization", "value": "Bearer " + token}, map[string]any{"name": "Accept", "value": "application/json"}})
			// The checks before the commit passed (skipped): the file is the
			// Stage's Stack and the grace a duration.
			for _, a := range []string{"check-grace", "check-stack-file"} {
				if !s[a].skipped {
					t.Errorf("%s ran: %v", a, s[a].config)
				}
			}
			check("stack-file outputs", s["stack-file"].output, map[string]any{"apiVersion": "pulumi.com/v1", "kind": "Stack", "namespace": tt.ns, "name": "web"})
			// The wait stops accepting a missing Stack 5 minutes (the
			// default grace) after it starts.
			nfa, _ := s["grace"].output["stackNotFoundAfter"].(string)
			if at, err := time.Parse(time.RFC3339, nfa); err != nil || at.Before(before.Add(5*time.Minute)) || at.After(after.Add(5*time.Minute)) || !strings.HasSuffix(nfa, "Z") {
				t.Errorf("stackNotFoundAfter %q (%v), want 5m after %s–%s, in UTC", nfa, err, before, after)
			}
			check("http queryParams", v["queryParams"], []any{map[string]any{"name": "commit", "value": programSHA}, map[string]any{"name": "operation", "value": tt.op},
				map[string]any{"name": "notFoundAfter", "value": nfa}})
			// A Stack that did not wait for approval: no plan, and the
			// approval step skipped.
			if !s["approval"].skipped {
				t.Errorf("the approval step ran on a Stack that awaits none: %v", s["approval"].config)
			}
			check("plan queryParams", s["plan"].config["queryParams"], []any{map[string]any{"name": "commit", "value": programSHA}, map[string]any{"name": "operation", "value": tt.op},
				map[string]any{"name": "notFoundAfter", "value": nfa}, map[string]any{"name": "denyOn", "value": "none"}})
			want := map[string]any{"manifestsCommit": tt.manifestsCommit, "stackCommit": programSHA, "update": "web-7",
				"permalink": "https://app.pulumi.com/acme/web/dev/updates/7", "planSummary": "", "planFingerprint": ""}
			if tt.pr {
				want["pullRequest"] = "https://github.com/example/infra-manifests/pull/42"
			}
			check("compose-output", s["result"].output, want)
		})
	}
}

// TestNumericLookingCommit: a commit ID of digits stays a string wherever the
// tasks use it (quote()), or the schemas (string query params) would fail.
func TestNumericLookingCommit(t *testing.T) {
	freight := []kargoexpr.Commit{{RepoURL: programRepo, ID: digitsSHA}}
	runs, err := (&promotion{stage: stage(t, "dev"), tasks: allTasks(t), commits: freight}).run(t)
	if err != nil {
		t.Fatal(err)
	}
	s := byAlias(runs)
	if got := field(s["update-stack"].config, "updates").([]any)[0].(map[string]any)["value"]; got != digitsSHA {
		t.Errorf("yaml-update value %#v", got)
	}
	if got := s["result"].output["stackCommit"]; got != digitsSHA {
		t.Errorf("stackCommit %#v", got)
	}
}

// TestArgoCDSkippedAfterFailure: the argocd-update step has an `if`, which
// replaces Kargo's skip-after-failure default, so the condition itself must
// require success().
func TestArgoCDSkippedAfterFailure(t *testing.T) {
	runs, err := (&promotion{stage: stage(t, "dev"), tasks: allTasks(t), commits: []kargoexpr.Commit{{RepoURL: programRepo, ID: programSHA}}, failBefore: "push"}).run(t)
	if err != nil {
		t.Fatal(err)
	}
	if !byAlias(runs)["sync"].skipped {
		t.Error("argocd-update runs after a failed push")
	}
}

// TestMissingVarsFail: a Stage that does not give a var without default fails
// the Promotion, as Kargo does; and an optional var cannot be declared with
// an empty default (why argocdApp is not declared).
func TestMissingVarsFail(t *testing.T) {
	tasks := allTasks(t)
	st := roundTrip(t, stage(t, "dev"))
	ref := field(st, "spec", "promotionTemplate", "spec").(map[string]any)["steps"].([]any)[0].(map[string]any)
	ref["vars"] = []any{map[string]any{"name": "manifestsRepoURL", "value": "https://github.com/example/m.git"}}
	_, err := (&promotion{stage: st, tasks: tasks, commits: []kargoexpr.Commit{{RepoURL: programRepo, ID: programSHA}}}).run(t)
	if err == nil || !strings.Contains(err.Error(), `missing value for variable "stackFile"`) {
		t.Errorf("without stackFile: %v", err)
	}
	task := roundTrip(t, tasks["ClusterPromotionTask/stackflow-promote"])
	task["spec"].(map[string]any)["vars"] = append(task["spec"].(map[string]any)["vars"].([]any), map[string]any{"name": "argocdApp", "value": ""})
	tasks["ClusterPromotionTask/stackflow-promote"] = task
	_, err = (&promotion{stage: stage(t, "staging"), tasks: map[string]map[string]any{"PromotionTask/stackflow-promote": task}, commits: []kargoexpr.Commit{{RepoURL: programRepo, ID: programSHA}}}).run(t)
	if err == nil || !strings.Contains(err.Error(), `"argocdApp"`) {
		t.Errorf("argocdApp declared with an empty default: %v", err)
	}
}

// TestVerificationArgs: the Stages' verification args, evaluated with only
// the Stage's vars and the freight (as Kargo does), are strings.
func TestVerificationArgs(t *testing.T) {
	for _, st := range build(t, "stages") {
		name := str(st, "metadata", "name")
		env := &kargoexpr.Env{Project: "kargo-demo", Stage: name, Commits: []kargoexpr.Commit{{RepoURL: programRepo, ID: digitsSHA}}}
		if err := env.EvaluateVars(vars(st, "spec", "vars"), nil); err != nil {
			t.Fatal(err)
		}
		got := map[string]any{}
		for _, a := range list(st, "spec", "verification", "args") {
			v, err := env.Template(str(a, "value"))
			if err != nil {
				t.Fatalf("%s: arg %s: %v", name, str(a, "name"), err)
			}
			got[str(a, "name")] = v
		}
		want := map[string]any{"namespace": name, "stack": "web", "commit": digitsSHA}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: verification args %#v, want %#v", name, got, want)
		}
		tmpl := list(st, "spec", "verification", "analysisTemplates")
		if len(tmpl) != 1 || str(tmpl[0], "kind") != "ClusterAnalysisTemplate" || !strings.HasPrefix(str(tmpl[0], "name"), "stackflow-stack-") {
			t.Errorf("%s: analysisTemplates %v", name, tmpl)
		}
	}
}

// TestSchemasCatchMistakes: the schema check is no rubber stamp. It also
// records which of the schemas the tasks use close their objects.
func TestSchemasCatchMistakes(t *testing.T) {
	used := map[string]bool{}
	for _, task := range build(t, "tasks") {
		for _, s := range list(task, "spec", "steps") {
			used[str(s, "uses")] = true
		}
	}
	for step := range used {
		d := schemas.doc(t, step+"-config.json")
		schemas.schema(t, step)
		if d["additionalProperties"] != false {
			if _, ok := d["properties"]; ok {
				t.Errorf("%s: the schema declares properties but does not close the object; the unknown-field check covers it", step)
			}
			t.Logf("%s: schema without additionalProperties: false (free-form: %v)", step, d["properties"] == nil)
		}
	}
	for _, tt := range []struct {
		step string
		cfg  string
	}{
		{"http", `{"url": "http://x", "successExpresion": "true"}`},
		{"http", `{"url": "http://x", "headers": [{"name": "A", "value": "b", "x": 1}]}`},
		{"http", `{"url": "http://x", "queryParams": [{"name": "commit", "value": 1.5}]}`},
		{"http", `{"url": "http://x", "timeout": "${{ vars.timeout }}"}`},
		{"git-push", `{"path": "./m", "targetBranch": "main", "generateTargetBranch": true}`},
		{"git-wait-for-pr", `{"repoURL": "https://github.com/e/m.git", "prNumber": "42"}`},
		{"git-open-pr", `{"repoURL": "not a uri", "sourceBranch": "a", "targetBranch": "b"}`},
		{"argocd-update", `{"apps": [{"name": "a", "sources": [{"repoURL": "r", "desiredRevision": ""}]}]}`},
		{"git-clone", `{"repoURL": "r", "checkout": [{"branch": "main", "commit": "abc", "path": "p"}]}`},
		{"yaml-update", `{"path": "f", "updates": [{"key": "spec.commit"}]}`},
		{"compose-output", `{}`},
	} {
		var cfg map[string]any
		if err := json.Unmarshal([]byte(tt.cfg), &cfg); err != nil {
			t.Fatal(err)
		}
		if err := validate(t, tt.step, cfg); err == nil {
			t.Errorf("%s %s: accepted", tt.step, tt.cfg)
		}
	}
	// A step Kargo does not have (open-source Kargo has no custom steps).
	if _, err := schemas.compile("stackflow-verify"); err == nil || !strings.Contains(err.Error(), "not a built-in step") {
		t.Errorf("unknown step: %v", err)
	}
	// The unknown-field check on its own, for a schema without
	// additionalProperties: false on a nested object.
	if got := schemas.unknownFields(t, "http-config.json", schemas.doc(t, "http-config.json"),
		map[string]any{"url": "u", "outputs": []any{map[string]any{"name": "n", "fromExpression": "e", "extra": 1}}}, "config"); !reflect.DeepEqual(got, []string{"config.outputs[0].extra"}) {
		t.Errorf("unknownFields = %v", got)
	}
}
