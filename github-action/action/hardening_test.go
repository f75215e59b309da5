package action

import (
	"context"
	"encoding/base64"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/stackflow-io/stackflow/github-action/inputs"
	"github.com/stackflow-io/stackflow/github-action/manifests"
	"github.com/stackflow-io/stackflow/github-action/report"
	"github.com/stackflow-io/stackflow/github-action/workflow"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/leaks"
)

// commands are the workflow commands the runner would read from log, by
// name, ::add-mask:: (of the action's tokens) left out.
func commands(log string) map[string]int {
	n := map[string]int{}
	for _, c := range workflow.Commands(log) {
		if c.Name != "add-mask" {
			n[c.Name]++
		}
	}
	return n
}

// TestNoForgedWorkflowCommands: names a pull request chooses (a Stack's
// metadata.name, a project's name in Pulumi.yaml) holding a line break and
// a workflow command never start a command in the log: the runner reads one
// ::error:: per failed stack and nothing else of theirs.
func TestNoForgedWorkflowCommands(t *testing.T) {
	t.Run("manifests", func(t *testing.T) {
		w := newGitHubWorld(t)
		repo := gitrepo.New(t)
		w.ws = repo.Work
		base := repo.Commit(t, "base", map[string]string{"stacks/README.md": "manifests"})
		head := repo.Commit(t, "a Stack named to forge commands", map[string]string{"stacks/forge.yaml": "apiVersion: pulumi.com/v1\nkind: Stack\n" +
			"metadata:\n  name: \"web\\n::error::forged\\n::stop-commands::pwned\"\n  namespace: dev\nspec:\n  stack: dev\n  projectRepo: file:///nowhere\n  commit: " + appCommit + "\n"})
		c := w.config(t, inputs.ModeManifests, rwToken)
		c.BaseSHA, c.HeadSHA = base, head
		code, log := w.run(t, c)
		got := commands(log)
		if code != 1 || got["error"] != 1 || got["stop-commands"] != 0 || len(got) != 1 {
			t.Fatalf("exit %d, commands %v:\n%s", code, got, log)
		}
		if !strings.Contains(log, `refused, not previewed: metadata.name "web\n::error::forged\n::stop-commands::pwned" is not a Kubernetes object name`) {
			t.Errorf("the refusal is not in the log:\n%s", log)
		}
	})
	t.Run("program", func(t *testing.T) {
		w := newGitHubWorld(t)
		w.programBase(t, map[string]string{"infra/Pulumi.yaml": program})
		renamed := strings.Replace(program, "name: web", "name: \"web\\n::stop-commands::pwned\\n::error::forged\"", 1)
		if err := os.WriteFile(filepath.Join(w.ws, "infra", "Pulumi.yaml"), []byte(renamed), 0o644); err != nil {
			t.Fatal(err)
		}
		c := w.config(t, inputs.ModeProgram, rwToken)
		c.Stacks = []string{"dev"}
		code, log := w.run(t, c)
		got := commands(log)
		if code != 1 || got["error"] != 1 || got["stop-commands"] != 0 || len(got) != 1 {
			t.Fatalf("exit %d, commands %v:\n%s", code, got, log)
		}
		// The status stays the project's, as the base branch names it.
		if final := w.finalStatuses(headSHA); final[StatusContextPrefix+"web/dev"] != "failure" || len(final) != 1 {
			t.Errorf("statuses %v", final)
		}
	})
}

// TestCheckoutCredentialsWarning: a checkout that kept the workflow's token
// in its git configuration (actions/checkout without persist-credentials:
// false) gets a warning naming the entry, never its value.
func TestCheckoutCredentialsWarning(t *testing.T) {
	const token = "ghs_checkoutPersistedT0ken"
	w := newGitHubWorld(t)
	repo := gitrepo.New(t)
	w.ws = repo.Work
	sha := repo.Commit(t, "base", map[string]string{"stacks/README.md": "manifests"})
	header := "AUTHORIZATION: basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+token))
	if out, err := exec.Command("git", "-C", repo.Work, "config", "--local", "http.https://github.example/.extraheader", header).CombinedOutput(); err != nil {
		t.Fatalf("git config: %v %s", err, out)
	}
	c := w.config(t, inputs.ModeManifests, rwToken)
	c.BaseSHA, c.HeadSHA = sha, sha
	code, log := w.run(t, c)
	if code != 0 || !strings.Contains(log, "::warning::the checkout's git configuration holds credentials (http.https://github.example/.extraheader,") ||
		!strings.Contains(log, "persist-credentials: false") {
		t.Fatalf("exit %d:\n%s", code, log)
	}
	leaks.AssertNone(t, []string{token}, map[string]string{"log": log})

	// Without it, no warning.
	if out, err := exec.Command("git", "-C", repo.Work, "config", "--local", "--unset-all", "http.https://github.example/.extraheader").CombinedOutput(); err != nil {
		t.Fatalf("git config: %v %s", err, out)
	}
	if _, log := w.run(t, c); strings.Contains(log, "::warning::") {
		t.Fatalf("a warning without credentials:\n%s", log)
	}
}

// TestStatusContextsFromConfiguration: commit status contexts (and comment
// sections) come from what the workflow and the base branch configured, so
// a pull request cannot make one job post success on another job's status.
// Program mode's project name is the base's: a pull request that renames
// project api to web, another directory's project, is refused (web/dev
// keeps the failure its own job posted), one that renames it to a new name
// keeps the status api/dev. In manifests mode a pull request cannot add a
// Stack under another job's key: one that another manifests-dir holds, or
// one in a namespace named like a project (web/dev).
func TestStatusContextsFromConfiguration(t *testing.T) {
	w := newWorld(t)
	api := strings.Replace(program, "name: web", "name: api", 1)
	repo := w.programBase(t, map[string]string{
		"web/Pulumi.yaml": program, "api/Pulumi.yaml": api,
		"other/app.yaml": "apiVersion: pulumi.com/v1\nkind: Stack\nmetadata: {name: app, namespace: prod}\nspec:\n  stack: app\n  projectRepo: https://github.example/acme/app.git\n  commit: " + appCommit + "\n",
	})
	prog := "apiVersion: pulumi.com/v1\nkind: Program\nmetadata: {name: p, namespace: NS}\nprogram:\n  resources:\n    rec:\n      type: stackflowtest:index:Record\n      properties: {content: x}\n"
	steal := func(ns, name string) string {
		return strings.ReplaceAll(prog, "NS", ns) + "---\napiVersion: pulumi.com/v1\nkind: Stack\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec:\n  stack: " + ns + "-" + name + "\n  programRef: {name: p}\n"
	}
	head := repo.Commit(t, "the hostile pull request", map[string]string{
		"web/Pulumi.dev.yaml": "config:\n  web:failOn: bogus\n", // web's own change fails its preview
		"api/Pulumi.yaml":     program,                          // api renamed to web
		"stacks/app.yaml":     steal("prod", "app"),             // other/'s Stack
		"stacks/web-dev.yaml": steal("web", "dev"),              // program mode's web/dev
		"stacks/honest.yaml":  steal("team", "honest"),          // a new Stack of its own
	})
	run := func(mode inputs.Mode, dir string) (int, string) {
		c := w.config(t, mode, rwToken)
		c.HeadSHA = head
		c.WorkDir, c.Stacks, c.ManifestsDir = dir, []string{"dev"}, dir
		return w.run(t, c)
	}
	run(inputs.ModeProgram, "web") // web/dev: failure
	if code, log := run(inputs.ModeProgram, "api"); code != 1 || !strings.Contains(log, `refused, not previewed: Pulumi.yaml renames the project "api" to "web", the name of the project in web on the base branch`) {
		t.Fatalf("api renamed to web: exit %d:\n%s", code, log)
	}
	if code, log := run(inputs.ModeManifests, "stacks"); code != 1 {
		t.Fatalf("manifests: exit %d:\n%s", code, log)
	}
	var webDev []string
	for _, s := range w.gh.Statuses("acme", "infra", head) {
		if s.Context == StatusContextPrefix+"web/dev" {
			webDev = append(webDev, s.State+": "+s.Description)
		}
	}
	// web/dev: its job's pending and failure, then the manifests job's
	// refusal of the Stack that took its key; never a success.
	if len(webDev) != 4 || !strings.HasPrefix(webDev[1], "failure") || !strings.HasPrefix(webDev[3], "failure: preview failed: refused, not previewed: Stack web/dev is in namespace") {
		t.Errorf("statuses of web/dev: %q", webDev)
	}
	want := map[string]string{"web/dev": "failure", "api/dev": "failure", "prod/app": "failure", "team/honest": "success"}
	if got := w.finalStatuses(head); !equal(got, prefixed(want)) {
		t.Errorf("statuses %v, want %v", got, want)
	}
	body := w.gh.Comments("acme", "infra", 5)[0].Body
	if p, _ := report.Find(body, "prod/app"); !strings.Contains(p.Text, "refused, not previewed: Stack prod/app is new under stacks/, but the base branch has it in other/app.yaml") {
		t.Errorf("prod/app's section:\n%s", p.Text)
	}

	// A rename to a name nobody has is previewed, under the base's name.
	head = repo.Commit(t, "rename api to api2", map[string]string{"api/Pulumi.yaml": strings.Replace(program, "name: web", "name: api2", 1)})
	if code, log := run(inputs.ModeProgram, "api"); code != 0 {
		t.Fatalf("api renamed to api2: exit %d:\n%s", code, log)
	}
	if got := w.finalStatuses(head); !equal(got, prefixed(map[string]string{"api/dev": "success"})) {
		t.Errorf("statuses %v", got)
	}
	p, _ := report.Find(w.gh.Comments("acme", "infra", 5)[0].Body, "api/dev")
	if !strings.Contains(p.Text, "Pulumi.yaml renames the project &quot;api&quot; to &quot;api2&quot;") || !strings.Contains(p.Text, "Pulumi stack api2/dev") {
		t.Errorf("api/dev's section:\n%s", p.Text)
	}
}

func prefixed(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[StatusContextPrefix+k] = v
	}
	return out
}

// TestProgramModeOutdatesStacksNoLongerPreviewed: a run with dev and prod,
// then one with dev only: prod's section says it is outdated. The jobs of
// a matrix (one run, a stack each) never mark each other's.
func TestProgramModeOutdatesStacksNoLongerPreviewed(t *testing.T) {
	w := newWorld(t)
	w.programBase(t, map[string]string{"infra/Pulumi.yaml": program})
	for _, name := range []string{"dev", "prod"} {
		if _, err := auto.UpsertStackLocalSource(context.Background(), name, filepath.Join(w.ws, "infra"), auto.Pulumi(w.pe.Command(t)), auto.EnvVars(w.pe.EnvVars())); err != nil {
			t.Fatal(err)
		}
	}
	run := func(id string, stacks ...string) map[string]bool {
		t.Helper()
		c := w.config(t, inputs.ModeProgram, rwToken)
		c.RunID, c.Stacks = id, stacks
		if code, log := w.run(t, c); code != 0 {
			t.Fatalf("run %s: exit %d:\n%s", id, code, log)
		}
		out := map[string]bool{}
		for _, p := range report.Sections(w.gh.Comments("acme", "infra", 5)[0].Body) {
			out[p.Key] = p.Info.Outdated
		}
		return out
	}
	if got := run("100", "dev", "prod"); len(got) != 2 || got["web/dev"] || got["web/prod"] {
		t.Fatalf("run 100: %v", got)
	}
	if got := run("101", "dev"); len(got) != 2 || got["web/dev"] || !got["web/prod"] {
		t.Fatalf("run 101 (dev only): %v", got)
	}
	p, _ := report.Find(w.gh.Comments("acme", "infra", 5)[0].Body, "web/prod")
	if !strings.Contains(p.Text, "Outdated**: not previewed by the latest run of this workflow") {
		t.Errorf("prod's section:\n%s", p.Text)
	}
	// A matrix: run 102's prod job, then its dev job.
	run("102", "prod")
	if got := run("102", "dev"); len(got) != 2 || got["web/dev"] || got["web/prod"] {
		t.Fatalf("run 102 (a matrix): %v", got)
	}
}

// silentServer accepts connections and never answers: a git server that
// hangs.
type silentServer struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newSilentServer(t *testing.T) *silentServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silentServer{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			_ = c.Close()
		}
	})
	return s
}

// TestTimeouts: a pull request whose Stacks name a git server that never
// answers and a program that never finishes (it reads a FIFO no one writes
// to) fails those two Stacks, each with a message naming the input to
// raise, within the timeouts; the honest Stack is previewed and the job
// ends.
func TestTimeouts(t *testing.T) {
	w := newWorld(t)
	silent := newSilentServer(t)
	fifo := filepath.Join(t.TempDir(), "never")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close() // lets a reader still blocked go
		}
	})
	programDoc := func(name, content string) string {
		return "apiVersion: pulumi.com/v1\nkind: Program\nmetadata: {name: " + name + ", namespace: dev}\nprogram:\n  resources:\n    rec:\n      type: stackflowtest:index:Record\n      properties:\n        name: " + name + "\n        content:\n" + content
	}
	repo := gitrepo.New(t)
	w.ws = repo.Work
	base := repo.Commit(t, "base", map[string]string{"stacks/README.md": "manifests"})
	head := repo.Commit(t, "three Stacks", map[string]string{
		"stacks/hung-git.yaml":     stackManifest("hung-git", "  projectRepo: http://"+silent.ln.Addr().String()+"/app.git\n  commit: "+appCommit+"\n"),
		"stacks/hung-program.yaml": programDoc("hung", "          fn::readFile: "+fifo+"\n") + "---\n" + stackManifest("hung-program", "  programRef: {name: hung}\n"),
		"stacks/ok.yaml":           programDoc("ok", "          fn::join: [\"\", [ok]]\n") + "---\n" + stackManifest("ok", "  programRef: {name: ok}\n"),
	})
	c := w.config(t, inputs.ModeManifests, rwToken)
	c.BaseSHA, c.HeadSHA = base, head
	c.GitTimeout, c.PreviewTimeout, c.Parallel = 2*time.Second, 30*time.Second, 3
	type ran struct {
		code int
		log  string
	}
	done := make(chan ran, 1)
	start := time.Now()
	go func() {
		code, log := w.run(t, c)
		done <- ran{code, log}
	}()
	var r ran
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the job is still running two minutes later")
	}
	t.Logf("the job took %s", time.Since(start))
	if r.code != 1 {
		t.Fatalf("exit %d:\n%s", r.code, r.log)
	}
	want := prefixed(map[string]string{"dev/hung-git": "failure", "dev/hung-program": "failure", "dev/ok": "success"})
	if got := w.finalStatuses(head); !equal(got, want) {
		t.Fatalf("statuses %v, want %v\n%s", got, want, r.log)
	}
	body := w.gh.Comments("acme", "infra", 5)[0].Body
	for key, msg := range map[string]string{
		"dev/hung-git":     "git fetch did not finish within 2s (the git-timeout input): stopped",
		"dev/hung-program": "the preview did not finish within 30s (the preview-timeout input): stopped",
	} {
		if p, _ := report.Find(body, key); !strings.Contains(p.Text, msg) {
			t.Errorf("%s's section lacks %q:\n%s", key, msg, p.Text)
		}
	}
}

// TestProgramProject: the name of program mode's keys, decided from the
// base commit (table).
func TestProgramProject(t *testing.T) {
	own := manifests.Owners{
		Projects: map[string]string{"infra/web": "web", "infra/api": "api"},
		Stacks:   map[string]string{"ops/dev": "stacks/ops.yaml"},
	}
	for _, tt := range []struct {
		name, dir, head string
		want            string
		note, err       string
	}{
		{"unchanged", "infra/web", "web", "web", "", ""},
		{"renamed onto another project", "infra/api", "web", "api", "", `renames the project "api" to "web", the name of the project in infra/web on the base branch`},
		{"renamed onto a Stack's key", "infra/api", "ops", "api", "", `which makes stack dev's key ops/dev, the key of the Stack in stacks/ops.yaml`},
		{"renamed to a new name", "infra/api", "api2", "api", `renames the project "api" to "api2"`, ""},
		{"renamed to no project name", "infra/api", "api\n::error::x", "api", "", `"api\n::error::x", which is not a Pulumi project name`},
		{"new, onto another project", "infra/new", "web", "", "", `names the project "web", the name of the project in infra/web`},
		{"new", "infra/new", "new", "new", "", ""},
	} {
		got, notes, err := programProject(tt.dir, tt.head, own, []string{"dev", "org/x/prod"})
		if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) ||
			(tt.note == "") != (len(notes) == 0) || (tt.note != "" && !strings.Contains(notes[0], tt.note)) {
			t.Errorf("%s: %q %q %v; want %q, note %q, error %q", tt.name, got, notes, err, tt.want, tt.note, tt.err)
		}
	}
}

// TestPinBackend: with PULUMI_ACCESS_TOKEN and no PULUMI_BACKEND_URL the
// backend is pinned: to the stored login's, else the Pulumi Cloud.
func TestPinBackend(t *testing.T) {
	home := t.TempDir()
	login := t.TempDir()
	if err := os.WriteFile(filepath.Join(login, "credentials.json"), []byte(`{"current": "https://api.pulumi.acme.internal", "accessTokens": {"https://api.pulumi.acme.internal": "pul-x"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		e    env
		want string
	}{
		{"no token", env{"PULUMI_ACCESS_TOKEN": "", "PULUMI_BACKEND_URL": "", "PULUMI_HOME": home}, ""},
		{"token and backend", env{"PULUMI_ACCESS_TOKEN": "pul-x", "PULUMI_BACKEND_URL": "https://api.pulumi.com", "PULUMI_HOME": home}, ""},
		{"token alone", env{"PULUMI_ACCESS_TOKEN": "pul-x", "PULUMI_BACKEND_URL": "", "PULUMI_HOME": home}, PulumiCloudURL},
		{"token and a stored login", env{"PULUMI_ACCESS_TOKEN": "pul-x", "PULUMI_BACKEND_URL": "", "PULUMI_HOME": login}, "https://api.pulumi.acme.internal"},
	} {
		if got := pinBackend(tt.e, PulumiCloudURL); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
	for _, tt := range []struct{ url, want, err string }{
		{"", "", ""},
		{"https://api.pulumi.com/", "https://api.pulumi.com/", ""},
		{"s3://state", "s3://state", ""},
		{"https://evil.example", "", `backend.url "https://evil.example" is not in the action's backends input`},
	} {
		got, err := checkProjectBackend(tt.url, PulumiCloudURL, []string{"s3://state"})
		if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%q: %q %v", tt.url, got, err)
		}
	}
}
