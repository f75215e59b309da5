package substrate

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"k8s.io/client-go/discovery"
)

// TestControlPlaneIsTheBuiltKubernetes proves the tests run the kube-apiserver
// built from the module proxy, with its version stamped, and that our CRDs are
// served.
func TestControlPlaneIsTheBuiltKubernetes(t *testing.T) {
	cp := StartControlPlaneT(t)
	dc, err := discovery.NewDiscoveryClientForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != "v1.35.4" || v.Major != "1" || v.Minor != "35" {
		t.Fatalf("server version = %+v, want v1.35.4 (1.35)", v)
	}
	for gv, kinds := range map[string][]string{
		"pulumi.com/v1":            {"Stack", "Program"},
		"pulumi.com/v1alpha1":      {"Stack"},
		"auto.pulumi.com/v1alpha1": {"Workspace", "Update"},
	} {
		res, err := dc.ServerResourcesForGroupVersion(gv)
		if err != nil {
			t.Fatalf("%s not served: %v", gv, err)
		}
		served := map[string]bool{}
		for _, r := range res.APIResources {
			served[r.Kind] = true
		}
		for _, k := range kinds {
			if !served[k] {
				t.Errorf("%s %s not served (have %v)", gv, k, served)
			}
		}
	}
}

// gitRepo makes a git repository with the given files committed and returns the
// directory and the commit SHA.
func gitRepo(t *testing.T, files map[string]string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	run := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("init", "-q", "-b", "main")
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run("add", "-A")
	run("commit", "-q", "-m", "program")
	return dir, run("rev-parse", "HEAD")
}

const smokeProgram = `name: smoke
runtime: yaml
config:
  greeting:
    type: string
resources:
  hello:
    type: stackflowtest:index:Record
    properties:
      name: hello
      content: ${greeting}
outputs:
  path: ${hello.path}
  content: ${hello.content}
`

// TestPulumiUpRecordsResourceAndGitHead runs the real engine: `pulumi up` of a
// YAML program using the test provider, in a git checkout, on a file:// backend.
func TestPulumiUpRecordsResourceAndGitHead(t *testing.T) {
	pe := NewPulumi(t)
	// Stack settings files are ignored, so setting config leaves the checkout
	// clean and the backend records git.dirty=false.
	dir, sha := gitRepo(t, map[string]string{"Pulumi.yaml": smokeProgram, ".gitignore": "Pulumi.*.yaml\n"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	stack, err := auto.UpsertStackLocalSource(ctx, "dev", dir,
		auto.Pulumi(pe.Command(t)), auto.EnvVars(pe.EnvVars()))
	if err != nil {
		t.Fatalf("select stack: %v", err)
	}
	if err := stack.SetConfig(ctx, "greeting", auto.ConfigValue{Value: "hello, world"}); err != nil {
		t.Fatal(err)
	}
	res, err := stack.Up(ctx, optup.Message("smoke"))
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	if got := res.Summary.ResourceChanges; got == nil || (*got)["create"] != 2 { // stack + record
		t.Fatalf("resource changes = %v, want 2 creates", got)
	}
	if content, ok := pe.Record(t, "hello"); !ok || content != "hello, world" {
		t.Fatalf("record hello = %q (exists %v), want %q", content, ok, "hello, world")
	}
	if out := res.Outputs["content"].Value; out != "hello, world" {
		t.Fatalf("output content = %v", out)
	}

	hist, err := stack.History(ctx, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 1 {
		t.Fatalf("history has %d entries", len(hist))
	}
	env := hist[0].Environment
	if env["git.head"] != sha || env["git.headName"] != "refs/heads/main" || env["git.dirty"] != "false" {
		b, _ := json.Marshal(env)
		t.Fatalf("history environment %s, want git.head=%s on refs/heads/main, clean", b, sha)
	}

	// Change the program's input: an in-place update of the same file.
	if err := stack.SetConfig(ctx, "greeting", auto.ConfigValue{Value: "changed"}); err != nil {
		t.Fatal(err)
	}
	res, err = stack.Up(ctx)
	if err != nil {
		t.Fatalf("second up: %v", err)
	}
	if got := (*res.Summary.ResourceChanges)["update"]; got != 1 {
		t.Fatalf("second up changes = %v, want 1 update", *res.Summary.ResourceChanges)
	}
	if content, _ := pe.Record(t, "hello"); content != "changed" {
		t.Fatalf("record after update = %q", content)
	}
}
