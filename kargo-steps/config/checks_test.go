package config

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stackflow-io/stackflow/analysis/verification"
	"github.com/stackflow-io/stackflow/kargo-steps/kargoexpr"
)

// withRefVars returns a copy of a Stage whose (first) task reference sets
// these vars, replacing any of the same name.
func withRefVars(t *testing.T, st map[string]any, set map[string]string) map[string]any {
	t.Helper()
	st = roundTrip(t, st)
	ref := field(st, "spec", "promotionTemplate", "spec").(map[string]any)["steps"].([]any)[0].(map[string]any)
	var out []any
	for _, v := range list(ref, "vars") {
		if _, ok := set[str(v, "name")]; !ok {
			out = append(out, v)
		}
	}
	for name, value := range set {
		out = append(out, map[string]any{"name": name, "value": value})
	}
	ref["vars"] = out
	return st
}

// beforeTheCommit are the task steps that change the manifests repository:
// none may run once a check failed.
var changesTheRepository = []string{"update-stack", "commit", "push", "open-pr", "wait-for-pr", "sync", "grace", "verify", "result"}

// TestStackFileCheck: the tasks read stackFile's first document and refuse,
// before anything is committed, one that is not the Stage's Stack
// (stackNamespace/stackName), naming both. Both tasks, on the same table.
func TestStackFileCheck(t *testing.T) {
	const path = "./manifests/stacks/dev/web.yaml"
	other := func(ns, name string) string { return stackManifest(ns, name) }
	for _, tt := range []struct {
		name string
		file string
		// refused: the check fails the Promotion, with these in its
		// message; errored: yaml-parse itself fails (the file does not
		// parse as a mapping). Either way nothing is committed.
		refused, errored bool
		msg              []string
	}{
		{name: "the Stage's Stack", file: other("dev", "web")},
		{name: "CRLF line endings", file: strings.ReplaceAll(other("dev", "web"), "\n", "\r\n")},
		{name: "after a document separator, with a second document", file: "---\n" + other("dev", "web") + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"},
		{name: "v1alpha1", file: strings.Replace(other("dev", "web"), "pulumi.com/v1", "pulumi.com/v1alpha1", 1)},
		// The case of the issue: a mistyped stackName with the real file.
		{name: "another name", file: other("dev", "web-api"), refused: true,
			msg: []string{"stackFile stacks/dev/web.yaml must hold the Stack dev/web", `named "web-api" in namespace "dev"`, "nothing was committed"}},
		{name: "another namespace", file: other("prod", "web"), refused: true, msg: []string{`named "web" in namespace "prod"`}},
		{name: "no namespace", file: strings.Replace(other("dev", "web"), "  namespace: dev\n", "", 1), refused: true,
			msg: []string{`in namespace ""`, "must give metadata.namespace"}},
		{name: "the Stack second, after a ConfigMap", file: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web, namespace: dev}\n---\n" + other("dev", "web"), refused: true,
			msg: []string{`kind "ConfigMap" (apiVersion "v1") named "web" in namespace "dev"`}},
		{name: "the Stack second, after another Stack", file: other("dev", "web-api") + "---\n" + other("dev", "web"), refused: true, msg: []string{`"web-api"`}},
		{name: "another group's Stack", file: strings.Replace(other("dev", "web"), "pulumi.com/v1", "stacks.example.com/v1", 1), refused: true,
			msg: []string{`kind "Stack" (apiVersion "stacks.example.com/v1")`}},
		{name: "kind in another case", file: strings.Replace(other("dev", "web"), "kind: Stack", "kind: stack", 1), refused: true},
		{name: "name as a number", file: strings.Replace(other("dev", "web"), "name: web", "name: 7", 1), refused: true, msg: []string{`named "7"`}},
		{name: "comments only", file: "# nothing yet\n", errored: true},
		{name: "a list", file: "- apiVersion: pulumi.com/v1\n  kind: Stack\n", errored: true},
		{name: "metadata a string", file: "apiVersion: pulumi.com/v1\nkind: Stack\nmetadata: web\n", errored: true},
		{name: "not YAML", file: "apiVersion: [\n", errored: true},
		{name: "empty", file: "", errored: true},
	} {
		for _, stageName := range []string{"dev", "prod"} { // stackflow-promote, stackflow-promote-pr
			t.Run(tt.name+"/"+stageName, func(t *testing.T) {
				st := withRefVars(t, stage(t, stageName), map[string]string{"stackFile": "stacks/dev/web.yaml"})
				st = withStageVars(t, st, map[string]string{"stackNamespace": "dev", "stackName": "web"})
				runs, err := (&promotion{stage: st, tasks: allTasks(t), commits: []kargoexpr.Commit{{RepoURL: programRepo, ID: programSHA}},
					files: map[string]string{path: tt.file}}).run(t)
				if err != nil {
					t.Fatal(err)
				}
				s := byAlias(runs)
				check := s["check-stack-file"]
				switch {
				case tt.errored:
					if s["stack-file"].status != "Errored" || !check.skipped {
						t.Fatalf("yaml-parse %s (%v), check skipped %v: want yaml-parse to fail", s["stack-file"].status, s["stack-file"].err, check.skipped)
					}
				case tt.refused:
					if check.status != "Failed" {
						t.Fatalf("the check %s, want it to fail the Promotion (stack-file outputs %v)", check.status, s["stack-file"].output)
					}
					msg := str(check.config, "message")
					for _, want := range tt.msg {
						if !strings.Contains(msg, want) {
							t.Errorf("message %q lacks %q", msg, want)
						}
					}
				default:
					if !check.skipped || s["update-stack"].skipped || s["verify"].skipped {
						t.Fatalf("the Stage's own Stack: check skipped %v (%v), update-stack skipped %v, verify skipped %v",
							check.skipped, check.config, s["update-stack"].skipped, s["verify"].skipped)
					}
					return
				}
				for _, a := range changesTheRepository {
					if r, ok := s[a]; ok && !r.skipped {
						t.Errorf("step %s ran after the check failed", a)
					}
				}
			})
		}
	}
}

// withStageVars returns a copy of a Stage with these spec.vars set.
func withStageVars(t *testing.T, st map[string]any, set map[string]string) map[string]any {
	t.Helper()
	st = roundTrip(t, st)
	for _, v := range st["spec"].(map[string]any)["vars"].([]any) {
		if v := v.(map[string]any); set[str(v, "name")] != "" {
			v["value"] = set[str(v, "name")]
		}
	}
	return st
}

// TestNumericStackName: a Stack whose name Kargo's templating reads as a
// number (a var "7" becomes 7) still matches its manifest.
func TestNumericStackName(t *testing.T) {
	st := withStageVars(t, withRefVars(t, stage(t, "dev"), map[string]string{"stackFile": "s.yaml"}), map[string]string{"stackNamespace": "dev", "stackName": "7"})
	runs, err := (&promotion{stage: st, tasks: allTasks(t), commits: []kargoexpr.Commit{{RepoURL: programRepo, ID: programSHA}},
		files: map[string]string{"./manifests/s.yaml": stackManifest("dev", "7")}}).run(t)
	if err != nil {
		t.Fatal(err)
	}
	if s := byAlias(runs); !s["check-stack-file"].skipped || s["update-stack"].skipped {
		t.Fatalf("Stack dev/7 refused: %v", s["check-stack-file"].config)
	}
}

// TestStackNotFoundGrace: the wait sends notFoundAfter, the start of the wait
// plus stackNotFoundGrace, in the form the analysis service parses; a grace
// that is no duration of at most 30m fails the Promotion before the clone.
func TestStackNotFoundGrace(t *testing.T) {
	for _, tt := range []struct {
		grace string
		want  time.Duration // 0: refused
	}{
		{"5m", 5 * time.Minute},
		{"90s", 90 * time.Second},
		{"1m30s", 90 * time.Second},
		{"30m", 30 * time.Minute},
		{"0s", 0},
		{"31m", -1},
		{"1h", -1},
		{"300", -1},
		{"5 minutes", -1},
		{"-1m", -1},
		{"1.5m", -1},
		{"5m\nx", -1},
	} {
		for _, stageName := range []string{"dev", "prod"} {
			t.Run(tt.grace+"/"+stageName, func(t *testing.T) {
				st := withRefVars(t, stage(t, stageName), map[string]string{"stackNotFoundGrace": tt.grace})
				before := time.Now().UTC().Truncate(time.Second)
				runs, err := (&promotion{stage: st, tasks: allTasks(t), commits: []kargoexpr.Commit{{RepoURL: programRepo, ID: programSHA}}}).run(t)
				if err != nil {
					t.Fatal(err)
				}
				after := time.Now().UTC()
				s := byAlias(runs)
				if tt.want < 0 {
					if s["check-grace"].status != "Failed" || !strings.Contains(str(s["check-grace"].config, "message"), "is not a duration of at most 30m") {
						t.Fatalf("check-grace %s: %v", s["check-grace"].status, s["check-grace"].config)
					}
					for _, a := range append([]string{"clone", "stack-file"}, changesTheRepository...) {
						if !s[a].skipped && s[a].alias != "" {
							t.Errorf("step %s ran after check-grace failed", a)
						}
					}
					return
				}
				if !s["check-grace"].skipped {
					t.Fatalf("check-grace ran: %v", s["check-grace"].config)
				}
				// The query the http step sends is one the service accepts,
				// with the instant it computed.
				q := url.Values{}
				for _, p := range list(s["verify"].config, "queryParams") {
					q.Add(str(p, "name"), str(p, "value"))
				}
				parsed, err := verification.ParseQuery(q)
				if err != nil {
					t.Fatalf("the analysis service refuses the wait's query %v: %v", q, err)
				}
				if at := parsed.NotFoundAfter; at.Before(before.Add(tt.want)) || at.After(after.Add(tt.want)) {
					t.Errorf("notFoundAfter %s, want %s after %s–%s", at, tt.want, before, after)
				}
			})
		}
	}
}
