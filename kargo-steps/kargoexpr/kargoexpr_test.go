package kargoexpr

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
)

const sha = "3f2a9c1e0b4d5a6f7e8d9c0b1a2f3e4d5c6b7a89"

func env() *Env {
	return &Env{
		Project: "kargo-demo", Stage: "dev", Promotion: "dev.01abc",
		TargetFreight: FreightRef{Name: "f1", Alias: "happy-fox"},
		StepAlias:     "promote::verify",
		Vars:          map[string]any{"repoURL": "https://github.com/example/infra.git", "n": "3", "empty": ""},
		Outputs: map[string]any{
			"promote::push": map[string]any{"commit": "abc123", "branch": "main"},
			"other::push":   map[string]any{"commit": "zzz"},
			"build":         map[string]any{"count": float64(2)},
		},
		Commits: []Commit{
			{RepoURL: "https://github.com/example/infra", ID: sha, Branch: "main", Message: "feat"},
			{RepoURL: "https://github.com/example/digits", ID: "1234567890123456789012345678901234567890"},
		},
		Secrets: map[string]map[string]string{"tok": {"token": "s3cret"}},
		Steps:   []StepStatus{{Alias: "promote::clone", Status: "Succeeded"}, {Alias: "promote::argocd", Status: "Skipped"}},
	}
}

func TestTemplate(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want any
	}{
		{"plain", "plain"},
		{"42", "42"}, // no delimiter: untouched
		{"${{ 42 }}", float64(42)},
		{"${{ true }}", true},
		{"${{ quote(true) }}", "true"},
		{"${{ quote(42) }}", "42"},
		{"${{ vars.n }}", float64(3)}, // a string that looks like a number becomes one
		{"${{ quote(vars.n) }}", "3"},
		{"n=${{ vars.n }}", "n=3"},
		{"${{ commitFrom(vars.repoURL).ID }}", sha},
		{"${{ commitFrom(vars.repoURL).ID[0:7] }}", sha[:7]},
		{"${{ commitFrom('https://nowhere') }}", nil},
		{"${{ commitFrom('https://github.com/example/digits').ID }}", 1.2345678901234568e39}, // why quote() matters
		{"${{ quote(commitFrom('https://github.com/example/digits').ID) }}", "1234567890123456789012345678901234567890"},
		{"Bearer ${{ secret('tok').token }}", "Bearer s3cret"},
		{"${{ secret('missing') }}", map[string]any{}},
		{"${{ task.outputs.push.commit }}", "abc123"},
		{"${{ task.outputs['push'].branch }}", "main"},
		{"${{ outputs.build.count }}", float64(2)},
		{"${{ ctx.stage }}/${{ ctx.project }}/${% ctx.targetFreight.alias %}", "dev/kargo-demo/happy-fox"},
		{"${{ {'a': 1} }}", map[string]any{"a": float64(1)}},
		{"${{ (vars.missing ?? '') != '' }}", false},
		{"${{ vars.empty != '' }}", false},
	} {
		got, err := env().Template(tt.in)
		if err != nil {
			t.Errorf("%s: %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s = %#v, want %#v", tt.in, got, tt.want)
		}
	}
}

func TestTemplateErrors(t *testing.T) {
	for _, in := range []string{
		"${{ commitFrom('https://nowhere').ID }}", // nil commit
		"${{ vars.repoURL",                        // unclosed
		"${{ nosuch(1) }}",
	} {
		if _, err := env().Template(in); err == nil {
			t.Errorf("%s: no error", in)
		}
	}
}

func TestTaskOutputsOnlyInTasks(t *testing.T) {
	e := env()
	e.StepAlias = "verify"
	if _, ok := e.Map()["task"]; ok {
		t.Fatal("task outputs outside a task")
	}
	if _, err := e.Template("${{ task.outputs.push.commit }}"); err == nil {
		t.Fatal("task.outputs evaluated outside a task")
	}
}

func TestEvaluateWalks(t *testing.T) {
	got, err := env().Evaluate(map[string]any{
		"${{ keys }}": "kept",
		"list":        []any{"${{ 1 + 1 }}", map[string]any{"x": "${{ ctx.stage }}"}, 7, true, nil},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"${{ keys }}": "kept", "list": []any{float64(2), map[string]any{"x": "dev"}, 7, true, nil}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%#v", got)
	}
}

func TestIf(t *testing.T) {
	e := env()
	for _, tt := range []struct {
		cond string
		want bool
		err  bool
	}{
		{"", true, false},
		{"${{ success() }}", true, false},
		{"${{ 'x' }}", false, true},
	} {
		got, err := e.If(tt.cond)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("if %q = %v, %v", tt.cond, got, err)
		}
	}
	e.Steps = append(e.Steps, StepStatus{Alias: "promote::open-pr", Status: "Failed", ContinueOnError: true})
	if ok, _ := e.If(""); !ok {
		t.Error("a failure with continueOnError counts")
	}
	e.Steps = append(e.Steps, StepStatus{Alias: "promote::push", Status: "Errored"})
	if ok, _ := e.If(""); ok {
		t.Error("a step without if runs after a failure")
	}
	if ok, _ := e.If("${{ success() }}"); ok {
		t.Error("success() after an errored step")
	}
}

func TestResolveTaskVars(t *testing.T) {
	task := []Var{{Name: "repoURL"}, {Name: "branch", Value: "main"}, {Name: "app", Value: ""}}
	if _, err := ResolveTaskVars(task, nil, []Var{{Name: "repoURL", Value: "u"}}); err == nil || !strings.Contains(err.Error(), `"app"`) {
		t.Fatalf("an empty default is no default: %v", err)
	}
	task = task[:2]
	if _, err := ResolveTaskVars(task, nil, nil); err == nil {
		t.Fatal("missing repoURL accepted")
	}
	got, err := ResolveTaskVars(task, []Var{{Name: "branch", Value: "prod"}}, []Var{{Name: "repoURL", Value: "u"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []Var{{Name: "repoURL", Value: "u"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("%v", got)
	}
	e := env()
	if err := e.EvaluateVars([]Var{{Name: "branch", Value: "prod"}, {Name: "b2", Value: "${{ vars.branch }}-x"}}, append(got, Var{Name: "c", Value: "${{ task.outputs.push.commit }}"})); err != nil {
		t.Fatal(err)
	}
	if want := map[string]any{"branch": "prod", "b2": "prod-x", "repoURL": "u", "c": "abc123"}; !reflect.DeepEqual(e.Vars, want) {
		t.Fatalf("%v", e.Vars)
	}
	if err := e.EvaluateVars([]Var{{Name: "p", Value: "${{ task.outputs.push.commit }}"}}, nil); err == nil {
		t.Fatal("a promotion var saw task outputs")
	}
}

func TestHTTPEnv(t *testing.T) {
	js := http.Header{"Content-Type": {"application/json; charset=utf-8"}}
	for _, tt := range []struct {
		name   string
		header http.Header
		body   string
		ct     string
		want   any
		err    bool
	}{
		{"json", js, `{"phase":"Running"}`, "", map[string]any{"phase": "Running"}, false},
		{"empty", js, ``, "", map[string]any{}, false},
		{"bad json", js, `<html>`, "", nil, true},
		{"html", http.Header{"Content-Type": {"text/html"}}, `<html>`, "", map[string]any{}, false},
		{"unknown type, json", nil, `[1]`, "", []any{float64(1)}, false},
		{"text", http.Header{"Content-Type": {"text/plain"}}, `bad gateway`, "", "bad gateway", false},
		{"override", http.Header{"Content-Type": {"text/plain"}}, `{"a":1}`, "application/json", map[string]any{"a": float64(1)}, false},
	} {
		env, err := HTTPEnv(200, tt.header, []byte(tt.body), tt.ct)
		if (err != nil) != tt.err {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if err != nil {
			continue
		}
		if got := env["response"].(map[string]any)["body"]; !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: body %#v", tt.name, got)
		}
	}
	env, _ := HTTPEnv(403, js, []byte(`{}`), "")
	if v, err := EvalPlain(`response.status == 403 && response.header("content-type") != ""`, env); err != nil || v != true {
		t.Fatalf("%v %v", v, err)
	}
}
