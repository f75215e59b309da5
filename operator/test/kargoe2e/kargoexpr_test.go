package kargoe2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/stackflow-io/stackflow/kargo-steps/kargoexpr"
	"github.com/stackflow-io/stackflow/test/framework/kargo"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// evaluate computes, with kargoexpr (the fast tests' evaluator), the config
// value at path of the step `as` of the task a Stage's Promotion ran, for
// that Promotion: the Stage's vars and its task reference's vars resolved
// as Kargo inflates the task.
func (p *pipeline) evaluate(ctx context.Context, promo *kargo.Promotion, f *kargo.Freight, as string, path ...string) string {
	t := p.t
	t.Helper()
	var stage *unstructured.Unstructured
	for _, u := range p.Example.Objects {
		if u.GetKind() == "Stage" && u.GetName() == promo.Spec.Stage {
			stage = u
		}
	}
	ref := nested(t, stage.Object, "spec", "promotionTemplate", "spec", "steps").([]any)[0].(map[string]any)
	tasks, err := kargo.Kustomize(filepath.Join(substrate.RepoRoot(), "kargo-steps", "config", "tasks"))
	if err != nil {
		t.Fatal(err)
	}
	var task *unstructured.Unstructured
	for _, u := range tasks {
		if u.GetName() == nested(t, ref, "task", "name") {
			task = u
		}
	}
	vars := func(v any) []kargoexpr.Var {
		var out []kargoexpr.Var
		l, _ := v.([]any)
		for _, e := range l {
			m := e.(map[string]any)
			val, _ := m["value"].(string)
			out = append(out, kargoexpr.Var{Name: m["name"].(string), Value: val})
		}
		return out
	}
	promoVars := vars(nested(t, stage.Object, "spec", "vars"))
	resolved, err := kargoexpr.ResolveTaskVars(vars(nested(t, task.Object, "spec", "vars")), promoVars, vars(ref["vars"]))
	if err != nil {
		t.Fatal(err)
	}
	var commits []kargoexpr.Commit
	for _, c := range f.Commits {
		commits = append(commits, kargoexpr.Commit{RepoURL: c.RepoURL, ID: c.ID, Message: c.Message})
	}
	env := &kargoexpr.Env{Project: p.Namespace, Stage: promo.Spec.Stage, Promotion: promo.Name,
		TargetFreight: kargoexpr.FreightRef{Name: f.Name, Alias: f.Alias}, Commits: commits}
	if err := env.EvaluateVars(promoVars, resolved); err != nil {
		t.Fatal(err)
	}
	for _, s := range nested(t, task.Object, "spec", "steps").([]any) {
		step := s.(map[string]any)
		if step["as"] != as {
			continue
		}
		v, err := env.Template(nested(t, step, append([]string{"config"}, path...)...).(string))
		if err != nil {
			t.Fatal(err)
		}
		return v.(string)
	}
	t.Fatalf("the task has no step %s", as)
	return ""
}

func nested(t testing.TB, m map[string]any, path ...string) any {
	t.Helper()
	v, ok, err := unstructured.NestedFieldNoCopy(m, path...)
	if !ok || err != nil {
		t.Fatalf("no %v (%v)", path, err)
	}
	return v
}

// commitMessages are the messages of every commit of the manifests
// repository.
func (p *pipeline) commitMessages(ctx context.Context) []string {
	p.t.Helper()
	out, err := exec.CommandContext(ctx, "git", "--git-dir", p.GitHub.Bare(kargo.ManifestsOwner, kargo.ManifestsRepo),
		"log", "--all", "--format=%B%x00").Output()
	if err != nil {
		p.t.Fatal(err)
	}
	var msgs []string
	for _, m := range strings.Split(string(out), "\x00") {
		msgs = append(msgs, strings.TrimSpace(m))
	}
	return msgs
}

// sameAsKargo checks that kargoexpr computes, for a Promotion Kargo ran,
// the commit message Kargo's git-commit step wrote with the shipped task.
func (p *pipeline) sameAsKargo(ctx context.Context, promo *kargo.Promotion, f *kargo.Freight) {
	t := p.t
	t.Helper()
	want := strings.TrimSpace(p.evaluate(ctx, promo, f, "commit", "message"))
	for _, m := range p.commitMessages(ctx) {
		if m == want {
			return
		}
	}
	t.Errorf("kargoexpr computes the commit message %q for Promotion %s; Kargo wrote none such: %q", want, promo.Name, p.commitMessages(ctx))
}
