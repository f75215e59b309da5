package manifests

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

// TestReadOwners: the projects and Stacks of a whole commit, files that do
// not parse skipped.
func TestReadOwners(t *testing.T) {
	repo := gitrepo.New(t)
	sha := repo.Commit(t, "base", map[string]string{
		"Pulumi.yaml":           "name: root\nruntime: yaml\n",
		"infra/web/Pulumi.yaml": "name: web\nruntime: yaml\n",
		"infra/api/Pulumi.yml":  "name: api\nruntime: yaml\n",
		"broken/Pulumi.yaml":    "name: [unclosed\n",
		"stacks/dev.yaml":       stackYAML("") + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n",
		"other/prod.yaml":       strings.Replace(stackYAML(""), "{name: s, namespace: ns}", "{name: p, namespace: prod}", 1),
		"charts/t.yaml":         "{{ .Values.x }}\n",
	})
	own, err := ReadOwners(context.Background(), repo.Work, sha, false, Origin{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{".": "root", "infra/web": "web", "infra/api": "api"}
	if !reflect.DeepEqual(own.Projects, want) || own.Stacks != nil {
		t.Fatalf("projects %v, stacks %v", own.Projects, own.Stacks)
	}
	own, err = ReadOwners(context.Background(), repo.Work, sha, true, Origin{})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"ns/s": "stacks/dev.yaml", "prod/p": "other/prod.yaml"}; !reflect.DeepEqual(own.Stacks, want) {
		t.Fatalf("stacks %v, want %v", own.Stacks, want)
	}
	if got := own.ProjectDirs("web"); !reflect.DeepEqual(got, []string{"infra/web"}) {
		t.Errorf("ProjectDirs(web) = %v", got)
	}
}

// TestCheckOwner: a Stack the pull request adds may not take a key the base
// gives to a Stack outside the job's manifests-dir, nor a namespace named
// like a Pulumi project (program mode's keys are <project>/<stack>).
func TestCheckOwner(t *testing.T) {
	own := &Owners{
		Projects: map[string]string{"infra/web": "web"},
		Stacks:   map[string]string{"prod/app": "other/app.yaml", "dev/app": "stacks/app.yaml"},
	}
	for _, tt := range []struct {
		name  string
		c     Change
		dir   string
		owner *Owners
		err   string
	}{
		{"another job's Stack", Change{Key: "prod/app", Namespace: "prod", Added: true}, "stacks", own,
			"Stack prod/app is new under stacks/, but the base branch has it in other/app.yaml"},
		{"a Stack moved into the directory", Change{Key: "prod/app", Namespace: "prod", Added: true}, "./stacks/", own, "other/app.yaml"},
		{"a project's namespace", Change{Key: "web/dev", Namespace: "web", Added: true}, "stacks", own,
			`Stack web/dev is in namespace "web", the name of the Pulumi project in infra/web`},
		{"a new Stack of its own", Change{Key: "dev/new", Namespace: "dev", Added: true}, "stacks", own, ""},
		{"its own Stack", Change{Key: "dev/app", Namespace: "dev", Added: true}, "stacks", own, ""},
		{"the whole repository", Change{Key: "prod/app", Namespace: "prod", Added: true}, ".", own, ""},
		{"a changed Stack", Change{Key: "web/dev", Namespace: "web"}, "stacks", own, ""},
		{"no owners read", Change{Key: "prod/app", Namespace: "prod", Added: true}, "stacks", nil, ""},
	} {
		err := checkOwner(tt.c, tt.dir, tt.owner)
		if (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.err)
		}
	}
}

// TestCheckName: a Stack's name and namespace are Kubernetes names, never a
// line break or markup from the pull request.
func TestCheckName(t *testing.T) {
	for _, tt := range []struct {
		name, namespace string
		ok              bool
	}{
		{"web", "dev", true},
		{"web.v2", "", true},
		{"web\n::error::forged", "dev", false},
		{"web", "dev\n::stop-commands::x", false},
		{"Web", "dev", false},
		{"web", "a.b", false},
		{strings.Repeat("a", 254), "dev", false},
	} {
		c := hostile(t, "x", "")
		c.Head.Name, c.Head.Namespace = tt.name, tt.namespace
		if err := checkName(c.Head); (err == nil) != tt.ok || (err != nil && strings.Contains(err.Error(), "\n")) {
			t.Errorf("%q/%q: %v", tt.namespace, tt.name, err)
		}
	}
}
