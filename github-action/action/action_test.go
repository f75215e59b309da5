package action

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/stackflow-io/stackflow/github-action/githubapi"
	"github.com/stackflow-io/stackflow/github-action/inputs"
	"github.com/stackflow-io/stackflow/github-action/report"
	"github.com/stackflow-io/stackflow/test/framework/fakegithub"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

const program = `name: web
runtime: yaml
config:
  content:
    type: string
    default: one
  failOn:
    type: string
    default: ""
resources:
  rec:
    type: stackflowtest:index:Record
    properties:
      name: ${pulumi.stack}
      content: ${content}
      failOn: ${failOn}
`

const headSHA = "1111111111111111111111111111111111111111"

// world is a fake GitHub, a real Pulumi environment and a runner's
// variables.
type world struct {
	gh *fakegithub.Server
	pe *substrate.Pulumi
	ws string
	// base is the pull request's base commit in program mode (see
	// programBase).
	base string
	// cloudURL replaces the Pulumi Cloud's URL (Deps.CloudURL).
	cloudURL string
}

// The tokens of the tests: installation tokens, as the workflow's
// GITHUB_TOKEN is ("ghs_…", comments by github-actions[bot], GET /user
// refused).
const (
	rwToken   = "ghs_rwWorkflowToken"
	forkToken = "ghs_readOnlyForkToken"
)

func newWorld(t *testing.T) *world {
	t.Helper()
	w := newGitHubWorld(t)
	w.pe = substrate.NewPulumi(t)
	return w
}

// newGitHubWorld is a world without Pulumi, for runs in which nothing is
// previewed.
func newGitHubWorld(t *testing.T) *world {
	t.Helper()
	w := &world{gh: fakegithub.New(t, fakegithub.Options{}), ws: t.TempDir()}
	w.gh.AddAppToken(rwToken, "github-actions[bot]", false)
	w.gh.AddAppToken(forkToken, "github-actions[bot]", true)
	return w
}

func (w *world) config(t *testing.T, mode inputs.Mode, token string) inputs.Config {
	t.Helper()
	dir := t.TempDir()
	return inputs.Config{Mode: mode, WorkDir: "infra", ManifestsDir: "stacks", GitHubToken: token, GitToken: token, Comment: inputs.CommentAlways,
		StatusChecks: true, Parallel: 2, Repository: "acme/infra", APIURL: w.gh.BaseURL(), ServerURL: "https://github.example", RunID: "77",
		Workspace: w.ws, StepSummaryFile: filepath.Join(dir, "summary.md"), OutputFile: filepath.Join(dir, "output"), PR: 5, HeadSHA: headSHA,
		GitTokenHosts: []string{"github.example"}, NotPreviewed: "failure", BaseSHA: w.base,
		GitTimeout: time.Minute, PreviewTimeout: 10 * time.Minute, Workflow: "acme/infra/.github/workflows/preview.yml"}
}

// programBase makes the workspace a git checkout whose commit, the pull
// request's base, holds files; a test then writes the head's files into
// the checkout.
func (w *world) programBase(t *testing.T, files map[string]string) *gitrepo.Repo {
	t.Helper()
	repo := gitrepo.New(t)
	w.base = repo.Commit(t, "base", files)
	w.ws = repo.Work
	return repo
}

func (w *world) run(t *testing.T, c inputs.Config) (int, string) {
	t.Helper()
	return w.runWith(t, c, nil)
}

// runWith runs the action with more variables for the pulumi processes.
func (w *world) runWith(t *testing.T, c inputs.Config, env map[string]string) (int, string) {
	t.Helper()
	var log bytes.Buffer
	d := Deps{GitHub: githubapi.Options{Settle: 10 * time.Millisecond}, AllowLoopbackHTTP: true, Env: map[string]string{}, CloudURL: w.cloudURL}
	if w.pe != nil {
		d.PulumiCommand, d.Env = w.pe.Command(t), w.pe.EnvVars()
	}
	for k, v := range env {
		d.Env[k] = v
	}
	code := Run(context.Background(), c, d, &log)
	return code, log.String()
}

// finalStatuses are the last state of each context on sha.
func (w *world) finalStatuses(sha string) map[string]string {
	final := map[string]string{}
	for _, s := range w.gh.Statuses("acme", "infra", sha) {
		final[s.Context] = s.State
	}
	return final
}

// noGetUser fails the test if the action asked GET /user, which GitHub
// refuses for the workflow's token.
func (w *world) noGetUser(t *testing.T) {
	t.Helper()
	for _, r := range w.gh.Requests() {
		if strings.HasPrefix(r, "GET /user") {
			t.Errorf("the action called %s", r)
		}
	}
}

func outputs(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		name, delim, ok := strings.Cut(lines[i], "<<")
		if !ok {
			continue
		}
		var v []string
		for i++; lines[i] != delim; i++ {
			v = append(v, lines[i])
		}
		out[name] = strings.Join(v, "\n")
	}
	return out
}

// TestProgramMode: two stacks of a program previewed with the real engine;
// one comment with a section each, edited in place by a second run;
// statuses on the head SHA; the job summary and outputs written; a failing
// stack fails the job.
func TestProgramMode(t *testing.T) {
	w := newWorld(t)
	w.programBase(t, map[string]string{"infra/Pulumi.yaml": program})
	infra := filepath.Join(w.ws, "infra")
	ctx := context.Background()
	for _, name := range []string{"dev", "prod"} {
		if _, err := auto.UpsertStackLocalSource(ctx, name, infra, auto.Pulumi(w.pe.Command(t)), auto.EnvVars(w.pe.EnvVars())); err != nil {
			t.Fatal(err)
		}
	}
	c := w.config(t, inputs.ModeProgram, rwToken)
	c.Stacks = []string{"dev", "prod"}
	code, log := w.run(t, c)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, log)
	}
	comments := w.gh.Comments("acme", "infra", 5)
	if len(comments) != 1 {
		t.Fatalf("%d comments", len(comments))
	}
	first := comments[0]
	for _, key := range []string{"web/dev", "web/prod"} {
		if _, ok := report.Find(first.Body, key); !ok {
			t.Fatalf("no section %s in:\n%s", key, first.Body)
		}
	}
	statuses := w.gh.Statuses("acme", "infra", headSHA)
	final := w.finalStatuses(headSHA)
	if final[StatusContextPrefix+"web/dev"] != "success" || final[StatusContextPrefix+"web/prod"] != "success" || len(statuses) != 4 {
		t.Fatalf("statuses %+v", statuses)
	}
	w.noGetUser(t)
	out := outputs(t, c.OutputFile)
	var changes []map[string]any
	if err := json.Unmarshal([]byte(out["changes"]), &changes); err != nil || len(changes) != 2 || out["has-changes"] != "true" || !strings.Contains(out["comment-url"], "issuecomment") {
		t.Fatalf("outputs %v (%v)", out, err)
	}
	if s, _ := os.ReadFile(c.StepSummaryFile); !strings.Contains(string(s), "stackflowtest:index:Record") {
		t.Fatalf("summary:\n%s", s)
	}
	if strings.Contains(first.Body, rwToken) {
		t.Fatal("the comment holds the token")
	}

	// Second run, prod's configuration now invalid (the provider's check
	// refuses it, so the preview fails): the same comment is edited; the job
	// fails; prod's status is failure.
	if err := os.WriteFile(filepath.Join(infra, "Pulumi.prod.yaml"), []byte("config:\n  web:failOn: bogus\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, log = w.run(t, c)
	if code != 1 || !strings.Contains(log, "::error::preview of web/prod failed") {
		t.Fatalf("exit %d:\n%s", code, log)
	}
	comments = w.gh.Comments("acme", "infra", 5)
	if len(comments) != 1 || comments[0].ID != first.ID || comments[0].Body == first.Body {
		t.Fatalf("comments after the second run: %d (id %d, first %d)", len(comments), comments[0].ID, first.ID)
	}
	p, _ := report.Find(comments[0].Body, "web/prod")
	if p.Info.Status != "failed" {
		t.Fatalf("prod's section: %+v", p.Info)
	}
	final = w.finalStatuses(headSHA)
	if final[StatusContextPrefix+"web/prod"] != "failure" {
		t.Fatalf("prod's status %q", final[StatusContextPrefix+"web/prod"])
	}
}

// A fork's read-only token: no failure, a warning, the summary written.
func TestForkTokenDoesNotFail(t *testing.T) {
	w := newWorld(t)
	w.programBase(t, map[string]string{"infra/Pulumi.yaml": program})
	infra := filepath.Join(w.ws, "infra")
	if _, err := auto.UpsertStackLocalSource(context.Background(), "dev", infra, auto.Pulumi(w.pe.Command(t)), auto.EnvVars(w.pe.EnvVars())); err != nil {
		t.Fatal(err)
	}
	c := w.config(t, inputs.ModeProgram, forkToken)
	c.Stacks = []string{"dev"}
	code, log := w.run(t, c)
	if code != 0 || !strings.Contains(log, "::warning::GitHub refused") {
		t.Fatalf("exit %d:\n%s", code, log)
	}
	if s, err := os.ReadFile(c.StepSummaryFile); err != nil || len(s) == 0 {
		t.Fatal("no job summary")
	}
	if n := len(w.gh.Comments("acme", "infra", 5)); n != 0 {
		t.Fatalf("%d comments", n)
	}
}

// TestManifestsMode: a PR advancing a Stack's spec.commit in the manifests
// repository previews the program at the new commit.
func TestManifestsMode(t *testing.T) {
	w := newWorld(t)
	// The program repository is served over smart HTTP on loopback and
	// wants the git token, which the action sends there because its host
	// is in git-token-hosts.
	prog, srv := gitrepo.NewServedHTTP(t, "prog.git", func(user, pass string) bool { return user == "x-access-token" && pass == rwToken })
	v1 := prog.Commit(t, "v1", map[string]string{"Pulumi.yaml": program})
	v2 := prog.Commit(t, "v2", map[string]string{"Pulumi.yaml": strings.Replace(program, "default: one", "default: two", 1)})
	stack := func(commit string) string {
		return "apiVersion: pulumi.com/v1\nkind: Stack\nmetadata:\n  name: web\n  namespace: dev\nspec:\n  stack: dev\n  projectRepo: " + prog.HTTPURL(srv) + "\n  commit: " + commit + "\n"
	}
	repo := gitrepo.New(t)
	base := repo.Commit(t, "base", map[string]string{"stacks/dev.yaml": stack(v1), "stacks/other.yaml": strings.Replace(strings.Replace(stack(v1), "name: web", "name: api", 1), "stack: dev", "stack: api", 1)})
	head := repo.Commit(t, "promote dev", map[string]string{"stacks/dev.yaml": stack(v2)})
	// dev runs v1 (as the operator would have applied it): the promotion's
	// preview shows the update v2 makes.
	checkout := filepath.Join(t.TempDir(), "program")
	if out, err := exec.Command("git", "clone", "-q", prog.URL(), checkout).CombinedOutput(); err != nil {
		t.Fatalf("clone: %v %s", err, out)
	}
	if out, err := exec.Command("git", "-C", checkout, "checkout", "-q", v1).CombinedOutput(); err != nil {
		t.Fatalf("checkout: %v %s", err, out)
	}
	s, err := auto.UpsertStackLocalSource(context.Background(), "dev", checkout, auto.Pulumi(w.pe.Command(t)), auto.EnvVars(w.pe.EnvVars()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.ws = repo.Work
	c := w.config(t, inputs.ModeManifests, rwToken)
	c.BaseSHA, c.HeadSHA = base, head
	c.GitTokenHosts = []string{srv.Addr}
	code, log := w.run(t, c)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, log)
	}
	comments := w.gh.Comments("acme", "infra", 5)
	if len(comments) != 1 {
		t.Fatalf("%d comments:\n%s", len(comments), log)
	}
	p, ok := report.Find(comments[0].Body, "dev/web")
	if !ok || p.Info.Status != "succeeded" || p.Info.Changes.Update != 1 || p.Info.Changes.Create != 0 {
		t.Fatalf("section dev/web: %+v\n%s", p.Info, comments[0].Body)
	}
	if _, ok := report.Find(comments[0].Body, "dev/api"); ok {
		t.Fatal("the unchanged Stack was previewed")
	}
	var final []string
	for _, s := range w.gh.Statuses("acme", "infra", head) {
		final = append(final, s.Context+"="+s.State)
	}
	if strings.Join(final, ",") != StatusContextPrefix+"dev/web=pending,"+StatusContextPrefix+"dev/web=success" {
		t.Fatalf("statuses %v", final)
	}
}

// comment: on-change creates no comment while nothing changes, one when a
// stack changes, and updates it when the change is gone again.
func TestCommentOnChange(t *testing.T) {
	w := newWorld(t)
	w.programBase(t, map[string]string{"infra/Pulumi.yaml": program})
	infra := filepath.Join(w.ws, "infra")
	write := func(p string) {
		if err := os.WriteFile(filepath.Join(infra, "Pulumi.yaml"), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(program)
	s, err := auto.UpsertStackLocalSource(context.Background(), "dev", infra, auto.Pulumi(w.pe.Command(t)), auto.EnvVars(w.pe.EnvVars()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := w.config(t, inputs.ModeProgram, rwToken)
	c.Stacks, c.Comment = []string{"dev"}, inputs.CommentOnChange
	if code, log := w.run(t, c); code != 0 || len(w.gh.Comments("acme", "infra", 5)) != 0 {
		t.Fatalf("no change: exit %d, %d comments\n%s", code, len(w.gh.Comments("acme", "infra", 5)), log)
	}
	write(strings.Replace(program, "default: one", "default: two", 1))
	if code, log := w.run(t, c); code != 0 || len(w.gh.Comments("acme", "infra", 5)) != 1 {
		t.Fatalf("a change: exit %d\n%s", code, log)
	}
	p, _ := report.Find(w.gh.Comments("acme", "infra", 5)[0].Body, "web/dev")
	if p.Info.Changes.Update != 1 {
		t.Fatalf("section %+v", p.Info)
	}
	write(program)
	if code, log := w.run(t, c); code != 0 {
		t.Fatalf("change gone: exit %d\n%s", code, log)
	}
	comments := w.gh.Comments("acme", "infra", 5)
	p, _ = report.Find(comments[0].Body, "web/dev")
	if len(comments) != 1 || p.Info.Changes.Any() {
		t.Fatalf("after the change is gone: %d comments, section %+v", len(comments), p.Info)
	}
}
