package examples

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	argov1alpha1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	"github.com/valyala/fasttemplate"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// fieldManager is the field manager Argo CD applies with
// (ServerSideApply=true).
const fieldManager = "argocd-controller"

// dryRunApply server-side applies an object as a dry run with strict field
// validation: an unknown or misspelt field, a wrong type, a CRD's CEL rule
// or an admission rule refuses it, and nothing is stored.
func dryRunApply(obj map[string]any) error {
	u := &unstructured.Unstructured{Object: obj}
	u = u.DeepCopy()
	//nolint:staticcheck // client.Apply through Patch is the only apply that takes FieldValidation.
	return api.c.Patch(context.Background(), u, client.Apply, client.DryRunAll, client.FieldOwner(fieldManager),
		client.ForceOwnership, client.FieldValidation("Strict"))
}

// TestExamplesDryRun server-side applies every object of the examples to the
// real API server (dry run, strict validation).
func TestExamplesDryRun(t *testing.T) {
	objs := exampleObjects(t)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.kind()]++
		if err := dryRunApply(o.obj); err != nil {
			t.Errorf("%s: refused by the API server: %v", o, err)
		}
	}
	// Every kind the examples are meant to ship was seen (the walk found the
	// files and the kustomizations rendered).
	for _, kind := range []string{
		"AppProject", "Application", "ApplicationSet", "Stack", "ServiceAccount", "Role", "RoleBinding", "ConfigMap",
		"Secret", "Project", "ProjectConfig", "Warehouse", "Stage", "AnalysisTemplate",
	} {
		if kinds[kind] == 0 {
			t.Errorf("no %s among the %d example objects (kinds seen: %v)", kind, len(objs), kinds)
		}
	}
	t.Logf("%d objects applied (dry run): %v", len(objs), kinds)
}

// TestDryRunRefusesMistakes: the dry run is no rubber stamp. Mistakes a user
// could make editing the examples are refused, naming the problem.
func TestDryRunRefusesMistakes(t *testing.T) {
	objs := exampleObjects(t)
	find := func(file, kind string) map[string]any {
		t.Helper()
		for _, o := range objs {
			if o.file == file && o.kind() == kind {
				return roundTrip(t, o.obj)
			}
		}
		t.Fatalf("no %s in %s", kind, file)
		return nil
	}
	stack := func(edit func(spec map[string]any)) map[string]any {
		s := find("examples/argocd/environments/test/stack.yaml", "Stack")
		edit(s["spec"].(map[string]any))
		return s
	}
	app := find("examples/argocd/applications/dev.yaml", "Application")
	app["spec"].(map[string]any)["syncPolicy"].(map[string]any)["syncOption"] = []any{"ServerSideApply=true"}
	stage := find("examples/kargo/kustomization.yaml", "Stage")
	stage["spec"].(map[string]any)["promotionTemplate"].(map[string]any)["spec"].(map[string]any)["steps"].([]any)[0].(map[string]any)["retry"] = map[string]any{"timeout": "1h"}
	for _, tt := range []struct {
		name string
		obj  map[string]any
		want string
	}{
		{"a misspelt Stack field", stack(func(s map[string]any) { s["prerequisite"] = s["prerequisites"] }), ".spec.prerequisite: field not declared in schema"},
		{"a short commit", stack(func(s map[string]any) { s["commit"] = "0000000" }), "spec.commit must be a full 40-character"},
		{"branch and commit", stack(func(s map[string]any) { s["branch"] = "main" }), "spec.branch and spec.commit are mutually exclusive"},
		{"a misspelt Application field", app, ".spec.syncPolicy.syncOption: field not declared in schema"},
		{"retry on a Kargo task reference", stage, "cannot set retry"},
	} {
		err := dryRunApply(tt.obj)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}

// render substitutes an ApplicationSet template's parameters in every
// string of a JSON-shaped value, as Argo CD's renderer does in fasttemplate
// mode (applicationset/utils Render.Replace: fasttemplate with {{ }}
// delimiters, a tag's spaces trimmed, an unknown tag left as it is). Argo
// CD's renderer itself is not imported: its package would add a dozen
// modules to go.mod.
func render(v any, params map[string]any) any {
	switch v := v.(type) {
	case string:
		if !strings.Contains(v, "{{") {
			return v
		}
		tmpl, err := fasttemplate.NewTemplate(v, "{{", "}}")
		if err != nil {
			return v
		}
		return tmpl.ExecuteFuncString(func(w io.Writer, tag string) (int, error) {
			value, ok := params[strings.TrimSpace(tag)].(string)
			if strings.TrimSpace(tag) == "" || !ok {
				return w.Write([]byte(fmt.Sprintf("{{%s}}", tag)))
			}
			return w.Write([]byte(value))
		})
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			out[k] = render(e, params)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = render(e, params)
		}
		return out
	}
	return v
}

// prParams are the parameters Argo CD's pull request generator gives the
// template for one pull request (applicationset/generators/pull_request.go,
// fasttemplate mode).
func prParams(number, headSHA string) map[string]any {
	return map[string]any{
		"number": number, "title": "web: add a bucket", "branch": "add-bucket", "branch_slug": "add-bucket",
		"target_branch": "main", "target_branch_slug": "main", "head_sha": headSHA,
		"head_short_sha": headSHA[:8], "head_short_sha_7": headSHA[:7], "author": "octocat",
	}
}

// TestPreviewApplicationSet renders the PR preview ApplicationSet's template
// for a pull request as Argo CD's ApplicationSet controller does, dry-runs the Application,
// then builds its source as Argo CD's repo server does (the template
// directory's kustomization with the Application's nameSuffix and patches
// added) and dry-runs the result: a preview Stack web-pr-<N> pinned to the
// head SHA, previewing the prod stack, running as its own read-only
// ServiceAccount.
func TestPreviewApplicationSet(t *testing.T) {
	const headSHA = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
	b, err := os.ReadFile(filepath.Join(examplesDir(), "argocd", "preview", "applicationset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var appset argov1alpha1.ApplicationSet
	if err := yaml.UnmarshalStrict(b, &appset); err != nil {
		t.Fatalf("applicationset.yaml does not decode as Argo CD's ApplicationSet: %v", err)
	}
	if len(appset.Spec.Generators) != 1 || appset.Spec.Generators[0].PullRequest == nil || appset.Spec.Generators[0].PullRequest.Github == nil {
		t.Fatalf("want one GitHub pull request generator, got %+v", appset.Spec.Generators)
	}
	gh := appset.Spec.Generators[0].PullRequest.Github
	if gh.Owner != "example-org" || gh.Repo != "infra" || gh.TokenRef == nil || len(gh.Labels) == 0 {
		t.Errorf("GitHub generator %+v: want example-org/infra, a tokenRef and a label filter", gh)
	}
	if appset.Spec.GoTemplate {
		t.Fatal("the ApplicationSet uses Go templates; this test renders fasttemplate placeholders ({{number}})")
	}
	// As the ApplicationSet controller does (GetTempApplication: the
	// template's metadata and spec, then every string rendered).
	tmpl := appset.Spec.Template
	var tmp argov1alpha1.Application
	tmp.Annotations, tmp.Labels, tmp.Namespace, tmp.Name, tmp.Finalizers = tmpl.Annotations, tmpl.Labels, tmpl.Namespace, tmpl.Name, tmpl.Finalizers
	tmp.Spec = tmpl.Spec
	var app argov1alpha1.Application
	if err := json.Unmarshal(mustJSON(t, render(roundTrip(t, &tmp), prParams("42", headSHA))), &app); err != nil {
		t.Fatal(err)
	}
	app.APIVersion, app.Kind = "argoproj.io/v1alpha1", "Application"
	appObj := roundTrip(t, &app)
	delete(appObj, "status")
	delete(field(appObj, "metadata").(map[string]any), "creationTimestamp")
	if err := dryRunApply(appObj); err != nil {
		t.Fatalf("the rendered Application infra-pr-42 is refused: %v", err)
	}
	if app.Name != "infra-pr-42" || app.Spec.Project != "stackflow" || app.Spec.Source == nil || app.Spec.Source.Path != "preview/template" {
		t.Fatalf("rendered Application %s (project %s, source %+v)", app.Name, app.Spec.Project, app.Spec.Source)
	}
	if strings.Contains(string(mustJSON(t, &app)), "{{") {
		t.Errorf("the rendered Application still holds a placeholder: %s", mustJSON(t, &app))
	}

	// The repo server: a copy of the source directory, its kustomization
	// edited with the Application's kustomize options, then built.
	src := filepath.Join(examplesDir(), "argocd", app.Spec.Source.Path)
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatalf("the Application's path %s is not in examples/argocd: %v", app.Spec.Source.Path, err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kb, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k map[string]any
	if err := yaml.Unmarshal(kb, &k); err != nil {
		t.Fatal(err)
	}
	kust := app.Spec.Source.Kustomize
	if kust == nil {
		t.Fatal("the preview Application has no kustomize options")
	}
	if kust.NameSuffix != "" {
		k["nameSuffix"] = kust.NameSuffix
	}
	if len(kust.Patches) > 0 {
		var patches []any
		if err := json.Unmarshal(mustJSON(t, kust.Patches), &patches); err != nil {
			t.Fatal(err)
		}
		existing, _ := k["patches"].([]any)
		k["patches"] = append(existing, patches...)
	}
	out, err := yaml.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	objs := kustomizeBuild(t, dir)
	names := map[string]map[string]any{}
	for _, o := range objs {
		if err := dryRunApply(o.obj); err != nil {
			t.Errorf("preview object %s %s is refused: %v", o.kind(), o.name(), err)
		}
		if o.namespace() != app.Spec.Destination.Namespace {
			t.Errorf("preview object %s %s is in namespace %q, the Application's destination is %q", o.kind(), o.name(), o.namespace(), app.Spec.Destination.Namespace)
		}
		names[o.kind()+"/"+o.name()] = o.obj
	}
	st := names["Stack/web-pr-42"]
	if st == nil {
		t.Fatalf("no Stack web-pr-42 among %v", keys(names))
	}
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"spec.commit", field(st, "spec", "commit"), headSHA},
		{"spec.preview", field(st, "spec", "preview"), true},
		{"spec.stack", field(st, "spec", "stack"), "prod"},
		{"spec.destroyOnFinalize", field(st, "spec", "destroyOnFinalize"), nil},
		{"spec.workspaceTemplate.spec.serviceAccountName", field(st, "spec", "workspaceTemplate", "spec", "serviceAccountName"), "web-pr-42"},
	} {
		if c.got != c.want {
			t.Errorf("Stack web-pr-42 %s = %#v, want %#v", c.what, c.got, c.want)
		}
	}
	for _, want := range []string{"ServiceAccount/web-pr-42", "Role/web-pr-42", "RoleBinding/web-pr-42"} {
		if names[want] == nil {
			t.Errorf("no %s among %v", want, keys(names))
		}
	}
	if rb := names["RoleBinding/web-pr-42"]; rb != nil {
		if s := list(rb, "subjects"); len(s) != 1 || str(s[0], "name") != "web-pr-42" || str(rb, "roleRef", "name") != "web-pr-42" {
			t.Errorf("RoleBinding web-pr-42 binds %v to %v, want web-pr-42 to web-pr-42", s, field(rb, "roleRef"))
		}
	}
	if role := names["Role/web-pr-42"]; role != nil {
		for _, r := range list(role, "rules") {
			for _, v := range stringList(r, "verbs") {
				if v != "get" && v != "list" && v != "watch" {
					t.Errorf("the preview Role may %s: a preview runs the pull request's code and must only read", v)
				}
			}
		}
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
