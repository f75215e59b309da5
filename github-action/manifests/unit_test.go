package manifests

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

// tree parses YAML streams as the files of a tree.
func tree(t *testing.T, commit string, files map[string]string) Tree {
	t.Helper()
	tr := Tree{Commit: commit, Stacks: map[string]StackDoc{}, ConfigMaps: map[string]*corev1.ConfigMap{}, Programs: map[string]*pulumiv1.Program{}}
	for name, src := range files {
		docs, err := splitDocuments([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			if err := tr.add(name, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	return tr
}

const sha1 = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
const sha2 = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

func stackYAML(spec string) string {
	return "apiVersion: pulumi.com/v1\nkind: Stack\nmetadata: {name: s, namespace: ns}\nspec:\n  stack: dev\n" + spec
}

const cm1 = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm, namespace: ns}\ndata: {k: one, other: x}\n"

func TestDiffReasons(t *testing.T) {
	git := "  projectRepo: https://example.com/r.git\n"
	prog := func(content string) string {
		return "apiVersion: pulumi.com/v1\nkind: Program\nmetadata: {name: p, namespace: ns}\nprogram:\n  resources:\n    r: {type: stackflowtest:index:Record, properties: {content: " + content + "}}\n"
	}
	tests := []struct {
		name       string
		base, head string
		baseExtra  string // more documents at base
		headExtra  string
		want       []string // nil: not changed
	}{
		{name: "same", base: git + "  commit: " + sha1 + "\n", head: git + "  commit: " + sha1 + "\n"},
		{name: "commit", base: git + "  commit: " + sha1 + "\n", head: git + "  commit: " + sha2 + "\n", want: []string{"commit"}},
		{name: "branch to commit", base: git + "  branch: main\n", head: git + "  commit: " + sha2 + "\n", want: []string{"commit", "branch"}},
		{name: "repoDir", base: git + "  branch: main\n", head: git + "  branch: main\n  repoDir: infra\n", want: []string{"repoDir"}},
		{name: "config formatting is no change", base: git + "  branch: main\n  config: {a: {x: 1, y: [1,2]}}\n", head: git + "  branch: main\n  config:\n    a:\n      y: [1, 2]\n      x: 1\n"},
		{name: "config value", base: git + "  branch: main\n  config: {a: 1}\n", head: git + "  branch: main\n  config: {a: \"1\"}\n", want: []string{"config"}},
		{name: "configRef", base: git + "  branch: main\n  configRef: {a: {name: cm, key: k}}\n", head: git + "  branch: main\n  configRef: {a: {name: cm, key: other}}\n",
			baseExtra: cm1, headExtra: cm1, want: []string{"configRef"}},
		{name: "referenced ConfigMap key", base: git + "  branch: main\n  configRef: {a: {name: cm, key: k}}\n", head: git + "  branch: main\n  configRef: {a: {name: cm, key: k}}\n",
			baseExtra: cm1, headExtra: strings.Replace(cm1, "k: one", "k: two", 1), want: []string{"ConfigMap ns/cm key k"}},
		{name: "unreferenced ConfigMap key", base: git + "  branch: main\n  configRef: {a: {name: cm, key: k}}\n", head: git + "  branch: main\n  configRef: {a: {name: cm, key: k}}\n",
			baseExtra: cm1, headExtra: strings.Replace(cm1, "other: x", "other: y", 1)},
		{name: "ConfigMap in another namespace", base: git + "  branch: main\n  configRef: {a: {name: cm, key: k}}\n", head: git + "  branch: main\n  configRef: {a: {name: cm, key: k}}\n",
			baseExtra: strings.Replace(cm1, "namespace: ns", "namespace: other", 1), headExtra: strings.Replace(strings.Replace(cm1, "k: one", "k: two", 1), "namespace: ns", "namespace: other", 1)},
		{name: "programRef Program", base: "  programRef: {name: p}\n", head: "  programRef: {name: p}\n", baseExtra: prog("a"), headExtra: prog("b"), want: []string{"Program ns/p"}},
		{name: "programRef", base: "  programRef: {name: p}\n", head: "  programRef: {name: q}\n", want: []string{"programRef"}},
		{name: "secretsRef is no change", base: git + "  branch: main\n", head: git + "  branch: main\n  secretsRef: {a: {type: Literal, literal: {value: x}}}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tree(t, sha1, map[string]string{"a.yaml": stackYAML(tt.base) + "---\n" + tt.baseExtra})
			h := tree(t, sha2, map[string]string{"a.yaml": stackYAML(tt.head) + "---\n" + tt.headExtra})
			cs := Diff(b, h)
			if tt.want == nil {
				if len(cs) != 0 {
					t.Fatalf("changed: %q", cs[0].Reasons)
				}
				return
			}
			if len(cs) != 1 || !reflect.DeepEqual(cs[0].Reasons, tt.want) {
				t.Fatalf("changes %+v, want reasons %q", cs, tt.want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	repo := gitrepo.New(t)
	sha := repo.Commit(t, "m", map[string]string{
		"m/a.yaml":         "---\n# empty\n---\n" + stackYAML("  branch: main\n") + "---\n---\n" + cm1 + "...\n",
		"m/sub/b.json":     `{"apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": {"name": "j"}, "spec": {"stack": "x"}}`,
		"m/list.yaml":      "- a\n- b\n",
		"m/notes.txt":      "kind: Stack",
		"outside/c.yaml":   stackYAML(""),
		"m/other-kind.yml": "apiVersion: example.com/v1\nkind: Stack\nmetadata: {name: foreign}\n",
	})
	tr, err := Load(context.Background(), repo.Work, "m/", sha, Origin{})
	if err != nil {
		t.Fatal(err)
	}
	var stacks []string
	for k, s := range tr.Stacks {
		stacks = append(stacks, k+"@"+s.File)
	}
	if len(stacks) != 2 || tr.Stacks["ns/s"].File != "m/a.yaml" || tr.Stacks["j"].File != "m/sub/b.json" || tr.ConfigMaps["ns/cm"] == nil || len(tr.ConfigMaps) != 1 {
		t.Fatalf("stacks %q, configmaps %d", stacks, len(tr.ConfigMaps))
	}

	bad := repo.Commit(t, "broken", map[string]string{"m/broken.yaml": "a: [\n"})
	if _, err := Load(context.Background(), repo.Work, "m", bad, Origin{}); err == nil || !strings.Contains(err.Error(), "m/broken.yaml at "+bad[:7]) {
		t.Fatalf("broken YAML: %v", err)
	}
	dup := repo.Commit(t, "dup", map[string]string{"m/broken.yaml": "", "m/dup.yaml": stackYAML("")})
	if _, err := Load(context.Background(), repo.Work, "m", dup, Origin{}); err == nil || !strings.Contains(err.Error(), "Stack ns/s is also in m/a.yaml") {
		t.Fatalf("duplicate Stack: %v", err)
	}
	if _, err := Load(context.Background(), repo.Work, "m", sha2, Origin{}); err == nil {
		t.Fatal("a commit that exists nowhere loaded")
	}
}

func TestPlanWithoutClone(t *testing.T) {
	ctx := context.Background()
	head := tree(t, sha2, map[string]string{
		"a.yaml": "apiVersion: pulumi.com/v1\nkind: Program\nmetadata: {name: p, namespace: ns}\nprogram:\n  resources:\n    r: {type: stackflowtest:index:Record, properties: {content: x}}\n",
	})
	tests := []struct {
		name     string
		spec     string
		removed  bool
		skip     bool
		notes    []string // substrings, in order
		config   map[string]string
		workFile string // a file expected in WorkDir
	}{
		{name: "removed", spec: "  branch: main\n", removed: true, skip: true, notes: []string{"was removed from the manifests"}},
		{name: "fluxSource", spec: "  fluxSource: {sourceRef: {apiVersion: source.toolkit.fluxcd.io/v1, kind: GitRepository, name: repo}}\n",
			skip: true, notes: []string{Unresolved + "fluxSource GitRepository ns/repo"}},
		{name: "programRef not in the tree", spec: "  programRef: {name: missing}\n", skip: true, notes: []string{Unresolved + "programRef: Program ns/missing"}},
		{name: "no source", spec: "", skip: true, notes: []string{"names no program source"}},
		{name: "programRef in the tree", spec: "  programRef: {name: p}\n  preview: true\n  config: {num: 3, s: str, o: {a: [1]}}\n  secrets: {pw: hunter2}\n" +
			"  secretsRef:\n    lit: {type: Literal, literal: {value: l1}}\n    env: {type: Env, Env: {name: TOKEN}}\n    file: {type: FS, filesystem: {path: /etc/x}}\n" +
			"  configRef: {c: {name: nocm, key: k}}\n" +
			"  envRefs:\n    A: {type: Literal, literal: {value: a}}\n    B: {type: Secret, secret: {name: sec, key: b}}\n  envSecrets: [es]\n  envs: [nocm]\n  environment: [esc-env]\n",
			notes: []string{"spec.preview is true",
				Unresolved + "configRef c: ConfigMap ns/nocm",
				Unresolved + "secretsRef env (the operator's environment variable TOKEN)",
				Unresolved + "secretsRef file (the operator's file /etc/x)",
				Unresolved + "envRefs B (Secret sec key b)",
				Unresolved + "envs: ConfigMap ns/nocm",
				Unresolved + "envSecrets: Secret ns/es",
				Unresolved + "environment esc-env"},
			config:   map[string]string{"num": "3", "s": `"str"`, "o": `{"a":[1]}`, "pw": "hunter2 (secret)", "lit": "l1 (secret)"},
			workFile: "Pulumi.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tree(t, sha2, map[string]string{"s.yaml": stackYAML(tt.spec)}).Stacks["ns/s"].Stack
			c := Change{Key: "ns/s", File: "s.yaml", Head: s, Added: true, Reasons: []string{"added"}}
			if tt.removed {
				c = Change{Key: "ns/s", File: "s.yaml", Base: s, Removed: true}
			}
			req, cleanup, err := Plan(ctx, c, head, PlanOptions{TempDir: t.TempDir()})
			defer cleanup()
			if err != nil {
				t.Fatal(err)
			}
			if req.Skip != tt.skip || req.Stack != "dev" || req.Key != "ns/s" {
				t.Fatalf("request %+v", req)
			}
			if len(req.Notes) != len(tt.notes) {
				t.Fatalf("notes %q", req.Notes)
			}
			for i, n := range tt.notes {
				if !strings.Contains(req.Notes[i], n) {
					t.Errorf("note %d = %q, want %q", i, req.Notes[i], n)
				}
			}
			if tt.config != nil {
				got := map[string]string{}
				for k, v := range req.Config {
					got[k] = v.Value
					if v.Secret {
						got[k] += " (secret)"
					}
				}
				if !reflect.DeepEqual(got, tt.config) {
					t.Errorf("config %q, want %q", got, tt.config)
				}
				if req.Env["A"] != "a" || len(req.Env) != 1 {
					t.Errorf("env %q", req.Env)
				}
			}
			if tt.workFile != "" {
				b, err := os.ReadFile(filepath.Join(req.WorkDir, tt.workFile))
				if err != nil || !strings.HasPrefix(string(b), "name: p\nruntime: yaml\n") || !strings.Contains(string(b), "stackflowtest:index:Record") {
					t.Errorf("%s: %v\n%s", tt.workFile, err, b)
				}
			}
		})
	}
}

// TestCloneToken: over HTTP, a clone that fails names the repository but
// never the token (nor its basic-auth form); once the server is up the same
// plan clones the commit, the token passed to git through its environment.
func TestCloneToken(t *testing.T) {
	const token = "ghs_s3cretT0ken"
	repo := gitrepo.New(t)
	sha := repo.Commit(t, "v1", map[string]string{"infra/Pulumi.yaml": "name: x\nruntime: yaml\n"})
	repo.Commit(t, "v2", map[string]string{"infra/Pulumi.yaml": "name: y\nruntime: yaml\n"})
	srv := gitrepo.NewHTTPServer(t, filepath.Dir(repo.Bare)) // not serving yet
	srv.Authorize = func(user, pass string) bool { return user == "x-access-token" && pass == token }
	s := tree(t, sha2, map[string]string{"s.yaml": stackYAML("  projectRepo: " + repo.HTTPURL(srv) + "\n  repoDir: /infra/\n  commit: " + sha + "\n")}).Stacks["ns/s"].Stack
	c := Change{Key: "ns/s", File: "s.yaml", Head: s, Added: true}
	o := PlanOptions{GitToken: token, TokenHosts: []string{srv.Addr}, AllowLoopbackHTTP: true, TempDir: t.TempDir()}
	req, cleanup, err := Plan(context.Background(), c, Tree{}, o)
	cleanup()
	if err == nil || req.Err == nil {
		t.Fatal("clone from a server that is down succeeded")
	}
	if strings.Contains(err.Error(), token) || strings.Contains(err.Error(), basicAuth(token)) || !strings.Contains(err.Error(), srv.Addr) {
		t.Fatalf("error %q", err)
	}
	if len(req.Masks) != 2 || req.Masks[0] != token {
		t.Fatalf("masks %q", req.Masks)
	}

	srv.Start(t)
	req, cleanup, err = Plan(context.Background(), c, Tree{}, o)
	defer cleanup()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(req.WorkDir, "Pulumi.yaml"))
	if err != nil || string(b) != "name: x\nruntime: yaml\n" {
		t.Fatalf("cloned %q (%v)", b, err)
	}
	if want := "Stack ns/s (s.yaml): new, commit " + sha[:7]; req.Source != want {
		t.Errorf("source %q, want %q", req.Source, want)
	}
}
