package manifests

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// Change is a Stack that a pull request adds, removes, or changes in a way
// that changes what it deploys.
type Change struct {
	// Key is "<namespace>/<name>" ("<name>" without a namespace).
	Key       string
	Namespace string
	Name      string
	// File holds the Stack at head (at base when removed), relative to the
	// repository root.
	File string
	// Base and Head are the Stack at the base and head commits; Base is nil
	// when Added, Head when Removed.
	Base, Head *pulumiv1.Stack
	// BaseCommit and HeadCommit are the manifests repository's commits.
	BaseCommit, HeadCommit string
	Added                  bool
	Removed                bool
	// Reasons say what changed: spec fields ("commit", "config", …) and
	// referenced objects ("ConfigMap dev/web-config key replicas",
	// "Program dev/app").
	Reasons []string
}

// Changed compares the manifests under manifestsDir at baseSHA and headSHA
// (see Load) and returns the Stacks that changed, sorted by key.
func Changed(ctx context.Context, repoDir, manifestsDir, baseSHA, headSHA string, o Origin) ([]Change, error) {
	base, err := Load(ctx, repoDir, manifestsDir, baseSHA, o)
	if err != nil {
		return nil, fmt.Errorf("base: %w", err)
	}
	head, err := Load(ctx, repoDir, manifestsDir, headSHA, o)
	if err != nil {
		return nil, fmt.Errorf("head: %w", err)
	}
	return Diff(base, head), nil
}

// Diff returns the Stacks of head that are not in base (Added), those of
// base not in head (Removed), and those whose projectRepo, stack, commit,
// branch, repoDir, config, configRef or programRef changed, or whose
// configRef keys or programRef Program (found in the trees, same namespace)
// changed. Other spec fields (secretsRef, envRefs, schedules…) do not make
// a change: they change how the operator runs, not what a preview shows
// with the inputs CI can resolve.
func Diff(base, head Tree) []Change {
	var out []Change
	for k, h := range head.Stacks {
		c := Change{Key: k, Namespace: h.Stack.Namespace, Name: h.Stack.Name, File: h.File,
			Head: h.Stack, BaseCommit: base.Commit, HeadCommit: head.Commit}
		b, ok := base.Stacks[k]
		if !ok {
			c.Added = true
			c.Reasons = []string{"added"}
			out = append(out, c)
			continue
		}
		c.Base = b.Stack
		c.Reasons = reasons(b.Stack, h.Stack, base, head)
		if len(c.Reasons) > 0 {
			out = append(out, c)
		}
	}
	for k, b := range base.Stacks {
		if _, ok := head.Stacks[k]; ok {
			continue
		}
		out = append(out, Change{Key: k, Namespace: b.Stack.Namespace, Name: b.Stack.Name, File: b.File,
			Base: b.Stack, BaseCommit: base.Commit, HeadCommit: head.Commit, Removed: true, Reasons: []string{"removed"}})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func git0(s *pulumiv1.Stack) pulumiv1.GitSource {
	if s.Spec.GitSource == nil {
		return pulumiv1.GitSource{}
	}
	return *s.Spec.GitSource
}

func reasons(b, h *pulumiv1.Stack, bt, ht Tree) []string {
	var r []string
	bg, hg := git0(b), git0(h)
	diff := func(name string, x, y any) {
		if !reflect.DeepEqual(x, y) {
			r = append(r, name)
		}
	}
	diff("projectRepo", bg.ProjectRepo, hg.ProjectRepo)
	diff("stack", b.Spec.Stack, h.Spec.Stack)
	diff("commit", bg.Commit, hg.Commit)
	diff("branch", bg.Branch, hg.Branch)
	diff("repoDir", bg.RepoDir, hg.RepoDir)
	diff("config", jsonValues(b.Spec.Config), jsonValues(h.Spec.Config))
	diff("configRef", normRefs(b.Spec.ConfigRef), normRefs(h.Spec.ConfigRef))
	diff("programRef", b.Spec.ProgramRef, h.Spec.ProgramRef)

	// Referenced ConfigMap keys (at head's references) whose values differ.
	seen := map[string]bool{}
	keys := make([]string, 0, len(h.Spec.ConfigRef))
	for k := range h.Spec.ConfigRef {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ref := h.Spec.ConfigRef[k]
		cmKey := key(h.Namespace, ref.Name)
		what := fmt.Sprintf("ConfigMap %s key %s", cmKey, ref.Key)
		if seen[what] {
			continue
		}
		seen[what] = true
		bv, bok := configMapValue(bt, cmKey, ref.Key)
		hv, hok := configMapValue(ht, cmKey, ref.Key)
		if bv != hv || bok != hok {
			r = append(r, what)
		}
	}
	if h.Spec.ProgramRef != nil {
		pk := key(h.Namespace, h.Spec.ProgramRef.Name)
		bp, hp := bt.Programs[pk], ht.Programs[pk]
		switch {
		case (bp == nil) != (hp == nil):
			r = append(r, "Program "+pk)
		case bp != nil && !reflect.DeepEqual(programJSON(bp), programJSON(hp)):
			r = append(r, "Program "+pk)
		}
	}
	return r
}

func configMapValue(t Tree, cmKey, k string) (string, bool) {
	cm := t.ConfigMaps[cmKey]
	if cm == nil {
		return "", false
	}
	if v, ok := cm.Data[k]; ok {
		return v, true
	}
	if v, ok := cm.BinaryData[k]; ok {
		return string(v), true
	}
	return "", false
}

// jsonValues decodes typed config, so formatting differences ({"a": 1} vs
// {"a":1}) are not changes.
func jsonValues(m map[string]pulumiv1.Any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		var x any
		if err := json.Unmarshal(v.Raw, &x); err != nil {
			x = string(v.Raw)
		}
		out[k] = x
	}
	return out
}

func normRefs(m map[string]pulumiv1.ConfigMapRef) map[string]pulumiv1.ConfigMapRef {
	out := map[string]pulumiv1.ConfigMapRef{}
	for k, v := range m {
		if v.JSON != nil && !*v.JSON {
			v.JSON = nil
		}
		out[k] = v
	}
	return out
}

func programJSON(p *pulumiv1.Program) any {
	b, _ := json.Marshal(p.Program)
	var x any
	_ = json.Unmarshal(b, &x)
	return x
}
