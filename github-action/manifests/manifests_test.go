package manifests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/stackflow-io/stackflow/github-action/gitcli"
	"github.com/stackflow-io/stackflow/github-action/preview"
	"github.com/stackflow-io/stackflow/github-action/result"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// program is version 1 of the program repository's app/Pulumi.yaml; version
// 2 changes the record's content.
const program = `name: promo
runtime: yaml
config:
  recordName:
    type: string
  content:
    type: string
  settings:
    default: {}
  password:
    type: string
    default: none
resources:
  rec:
    type: stackflowtest:index:Record
    properties:
      name: ${recordName}
      content: v1-${content}
outputs:
  settings: ${settings}
`

var program2 = strings.Replace(program, "v1-${content}", "v2-${content}", 1)

func stackDoc(name, extra string) string {
	return `apiVersion: pulumi.com/v1
kind: Stack
metadata:
  name: ` + name + `
  namespace: dev
spec:
  stack: ` + name + `-dev
  projectRepo: REPO
  repoDir: app
` + extra
}

func configMap(content string) string {
	return `apiVersion: v1
kind: ConfigMap
metadata:
  name: api-config
  namespace: dev
data:
  content: ` + content + `
  unrelated: x
`
}

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: dev
spec: {}
`

type fixture struct {
	pe               *substrate.Pulumi
	programRepo      *gitrepo.Repo
	programSrv       *gitrepo.HTTPServer
	sha1, sha2       string
	manifests        *gitrepo.Repo
	baseSHA, headSHA string
}

func programDir(t *testing.T, src string) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func deploy(t *testing.T, pe *substrate.Pulumi, dir, stack string, cfg map[string]string) {
	t.Helper()
	ctx := context.Background()
	s, err := auto.UpsertStackLocalSource(ctx, stack, dir, auto.Pulumi(pe.Command(t)), auto.EnvVars(pe.EnvVars()))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range cfg {
		if err := s.SetConfig(ctx, k, auto.ConfigValue{Value: v}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Up(ctx); err != nil {
		t.Fatalf("up %s: %v", stack, err)
	}
}

// newFixture: a program repository with two commits, stacks web-dev
// (deployed at the first) and api-dev (deployed at the second with content
// "a"), and a manifests repository whose head advances web's commit, changes
// api's ConfigMap, removes old, adds secret and leaves steady alone.
func newFixture(t *testing.T) *fixture {
	f := &fixture{pe: substrate.NewPulumi(t), manifests: gitrepo.New(t)}
	// The program repository is served over smart HTTP on loopback.
	f.programRepo, f.programSrv = gitrepo.NewServedHTTP(t, "program.git", nil)
	// Deploys run from copies of the program: their Pulumi.<stack>.yaml
	// stay out of the program repository.
	f.sha1 = f.programRepo.Commit(t, "v1", map[string]string{"app/Pulumi.yaml": program, "README.md": "program"})
	deploy(t, f.pe, programDir(t, program), "web-dev", map[string]string{"recordName": "web", "content": "hello"})
	f.sha2 = f.programRepo.Commit(t, "v2: new content", map[string]string{"app/Pulumi.yaml": program2})
	deploy(t, f.pe, programDir(t, program2), "api-dev", map[string]string{"recordName": "api", "content": "a"})

	repo := f.programRepo.HTTPURL(f.programSrv)
	web := func(sha string) string {
		return stackDoc("web", "  commit: "+sha+`
  config:
    recordName: web
    content: hello
    settings: {replicas: 2, zones: [a, b]}
`)
	}
	api := stackDoc("api", "  commit: "+f.sha2+`
  preview: true
  config:
    recordName: api
  configRef:
    content: {name: api-config, key: content}
`)
	steady := stackDoc("steady", "  commit: "+f.sha1+"\n  configRef:\n    other: {name: api-config, key: unrelated}\n")
	old := stackDoc("old", "  commit: "+f.sha1+"\n")
	secret := stackDoc("secret", "  branch: main\n"+`  config:
    recordName: secret
    content: s
  secretsRef:
    password:
      type: Secret
      secret: {name: db, key: password}
`)
	files := func(webSHA, cm string, withOld, withSecret bool) map[string]string {
		other := "# others\n---\n" + steady
		if withOld {
			other += "---\n" + old
		}
		m := map[string]string{
			"stacks/dev.yaml":   strings.ReplaceAll("---\n"+web(webSHA)+"---\n"+deployment+"---\n"+configMap(cm)+"---\n"+api, "REPO", repo),
			"stacks/other.yaml": strings.ReplaceAll(other, "REPO", repo),
			"README.md":         "manifests",
			"stacks/secret.yml": "",
		}
		if withSecret {
			m["stacks/secret.yml"] = strings.ReplaceAll(secret, "REPO", repo)
		}
		return m
	}
	f.baseSHA = f.manifests.Commit(t, "base", files(f.sha1, "a", true, false))
	f.headSHA = f.manifests.Commit(t, "promote web, change api's config", files(f.sha2, "b", false, true))
	return f
}

func keys(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Key)
	}
	return out
}

func TestManifestsMode(t *testing.T) {
	f := newFixture(t)

	// Changed, on the full repository and on a shallow clone of head.
	shallow := filepath.Join(t.TempDir(), "shallow")
	if out, err := exec.Command("git", "clone", "-q", "--depth", "1", f.manifests.URL(), shallow).CombinedOutput(); err != nil {
		t.Fatalf("shallow clone: %v\n%s", err, out)
	}
	if _, err := (gitcli.Cmd{Dir: shallow}).Output(context.Background(), "cat-file", "-e", f.baseSHA+"^{commit}"); err == nil {
		t.Fatal("the shallow clone has the base commit already")
	}
	wantKeys := []string{"dev/api", "dev/old", "dev/secret", "dev/web"}
	var changes []Change
	for _, dir := range []string{f.manifests.Work, shallow} {
		cs, err := Changed(context.Background(), dir, "stacks", f.baseSHA, f.headSHA, Origin{Timeout: time.Minute})
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if got := keys(cs); !reflect.DeepEqual(got, wantKeys) {
			t.Fatalf("%s: changed %q, want %q", dir, got, wantKeys)
		}
		changes = cs
	}
	wantReasons := map[string][]string{
		"dev/api":    {"ConfigMap dev/api-config key content"},
		"dev/old":    {"removed"},
		"dev/secret": {"added"},
		"dev/web":    {"commit"},
	}
	for _, c := range changes {
		if !reflect.DeepEqual(c.Reasons, wantReasons[c.Key]) {
			t.Errorf("%s reasons %q, want %q", c.Key, c.Reasons, wantReasons[c.Key])
		}
	}
	if c := changes[1]; !c.Removed || c.Head != nil || c.File != "stacks/other.yaml" {
		t.Errorf("old: %+v", c)
	}
	if c := changes[2]; !c.Added || c.Base != nil || c.File != "stacks/secret.yml" {
		t.Errorf("secret: %+v", c)
	}

	// Plan and Run, from the shallow clone's head tree.
	tree, err := Load(context.Background(), shallow, "stacks", f.headSHA, Origin{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reqs, cleanup := PlanAll(ctx, changes, tree, PlanOptions{Env: f.pe.EnvVars(), TempDir: t.TempDir(), AllowLoopbackHTTP: true})
	defer cleanup()
	for _, r := range reqs {
		if r.Err != nil {
			t.Fatalf("plan %s: %v", r.Key, r.Err)
		}
	}
	rs := preview.Options{PulumiCommand: f.pe.Command(t)}.Run(ctx, reqs, 4)
	byKey := map[string]result.Result{}
	for _, r := range rs {
		byKey[r.Key] = r
		t.Logf("%s: %s %+v %q", r.Key, r.Status, r.Changes, r.Notes)
	}

	web := byKey["dev/web"]
	if web.Status != result.Succeeded || web.Stack != "web-dev" || web.Project != "promo" {
		t.Fatalf("web = %+v", web)
	}
	if want := "Stack dev/web (stacks/dev.yaml): commit " + f.sha1[:7] + " → " + f.sha2[:7]; web.Source != want {
		t.Errorf("web source %q, want %q", web.Source, want)
	}
	if want := (result.Changes{Update: 1, Same: 1}); web.Changes != want || len(web.Resources) != 1 || web.Resources[0].Name != "rec" || web.Resources[0].Op != "update" {
		t.Errorf("web changes %+v resources %+v", web.Changes, web.Resources)
	}
	if !strings.Contains(web.Output, "v2-hello") || !strings.Contains(web.Output, "replicas") {
		t.Errorf("web output lacks the new content or the structured config:\n%s", web.Output)
	}

	api := byKey["dev/api"]
	if api.Status != result.Succeeded || api.Changes != (result.Changes{Update: 1, Same: 1}) || !strings.Contains(api.Output, "v2-b") {
		t.Errorf("api = %s %+v\n%s", api.Status, api.Changes, api.Output)
	}
	if want := "Stack dev/api (stacks/dev.yaml): commit " + f.sha2[:7] + " (ConfigMap dev/api-config key content changed)"; api.Source != want {
		t.Errorf("api source %q, want %q", api.Source, want)
	}
	if len(api.Notes) != 1 || !strings.Contains(api.Notes[0], "spec.preview is true") {
		t.Errorf("api notes %q", api.Notes)
	}

	old := byKey["dev/old"]
	if old.Status != result.Skipped || len(old.Notes) != 1 || !strings.Contains(old.Notes[0], "removed") {
		t.Errorf("old = %+v", old)
	}

	sec := byKey["dev/secret"]
	if sec.Status != result.Succeeded || sec.Changes != (result.Changes{Create: 2}) {
		t.Errorf("secret = %s %+v %s", sec.Status, sec.Changes, sec.Error)
	}
	if want := "Stack dev/secret (stacks/secret.yml): new, branch main (" + f.sha2[:7] + ")"; sec.Source != want {
		t.Errorf("secret source %q, want %q", sec.Source, want)
	}
	if len(sec.Notes) != 2 || !strings.HasPrefix(sec.Notes[0], Unresolved+"secretsRef password (Secret db key password)") ||
		!strings.Contains(sec.Notes[1], "does not exist in the backend yet") {
		t.Errorf("secret notes %q", sec.Notes)
	}
}
