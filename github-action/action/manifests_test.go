package action

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stackflow-io/stackflow/github-action/inputs"
	"github.com/stackflow-io/stackflow/github-action/report"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

// stackManifest is a Stack manifest in namespace dev.
func stackManifest(name, spec string) string {
	return "apiVersion: pulumi.com/v1\nkind: Stack\nmetadata:\n  name: " + name + "\n  namespace: dev\nspec:\n  stack: " + name + "\n" + spec
}

const appCommit = "0123456789abcdef0123456789abcdef01234567"

// TestNotPreviewedIsNotSuccess runs manifests mode on a pull request that
// previews nothing it could: it deletes a Stack that destroys its resources
// on deletion, adds a fluxSource Stack and one whose spec.commit injects a
// git option. None of them passes as success: each is reported, with the
// reason, and the job fails. With not-previewed: success the workflow
// accepts the first two, never the refused one. Then the pull request
// drops changes push by push: the sections of Stacks it no longer changes
// go, and when it changes nothing the comment says so.
func TestNotPreviewedIsNotSuccess(t *testing.T) {
	w := newGitHubWorld(t)
	marker := filepath.Join(t.TempDir(), "pwned")
	repo := gitrepo.New(t)
	w.ws = repo.Work
	app := "  projectRepo: https://github.example/acme/app.git\n  commit: " + appCommit + "\n"
	prod := stackManifest("prod", app+"  destroyOnFinalize: true\n")
	keep := stackManifest("keep", app)
	flux := stackManifest("flux", "  fluxSource:\n    sourceRef: {apiVersion: source.toolkit.fluxcd.io/v1, kind: GitRepository, name: app}\n")
	inject := stackManifest("inject", "  projectRepo: "+gitrepo.New(t).URL()+"\n  commit: \"--upload-pack=touch "+marker+"\"\n")
	base := repo.Commit(t, "base", map[string]string{"stacks/prod.yaml": prod, "stacks/keep.yaml": keep})
	head1 := repo.Commit(t, "delete prod, add flux and inject", map[string]string{"stacks/prod.yaml": "", "stacks/flux.yaml": flux, "stacks/inject.yaml": inject})

	c := w.config(t, inputs.ModeManifests, rwToken)
	c.BaseSHA, c.HeadSHA = base, head1
	code, log := w.run(t, c)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, log)
	}
	want := map[string]string{
		StatusContextPrefix + "dev/prod": "failure", StatusContextPrefix + "dev/flux": "failure", StatusContextPrefix + "dev/inject": "failure",
	}
	if got := w.finalStatuses(head1); !equal(got, want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	descs := map[string]string{}
	for _, s := range w.gh.Statuses("acme", "infra", head1) {
		descs[s.Context] = s.Description
	}
	if d := descs[StatusContextPrefix+"dev/prod"]; !strings.HasPrefix(d, "not previewed: Stack dev/prod was removed") {
		t.Errorf("prod's description %q", d)
	}
	if d := descs[StatusContextPrefix+"dev/inject"]; !strings.Contains(d, "refused, not previewed") {
		t.Errorf("inject's description %q", d)
	}
	body := w.gh.Comments("acme", "infra", 5)[0].Body
	if got := strings.Join(sectionKeys(body), " "); got != "dev/flux dev/inject dev/prod" {
		t.Fatalf("sections %q:\n%s", got, body)
	}
	p, _ := report.Find(body, "dev/prod")
	for _, want := range []string{"#### ⏭️ dev/prod · not previewed", "destroys the stack&#39;s resources (spec.destroyOnFinalize is true)"} {
		if !strings.Contains(p.Text, want) {
			t.Errorf("prod's section lacks %q:\n%s", want, p.Text)
		}
	}
	p, _ = report.Find(body, "dev/inject")
	if !strings.Contains(p.Text, "\n- ❌ refused, not previewed: spec.projectRepo &quot;file://") || strings.Contains(p.Text, "--uploa\n") || strings.Contains(p.Text, "usage: git") {
		t.Errorf("inject's section:\n%s", p.Text)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the injected option ran")
	}

	// The workflow accepts Stacks it cannot preview; a refused one still fails.
	c.NotPreviewed = "success"
	if code, log := w.run(t, c); code != 1 {
		t.Fatalf("not-previewed success: exit %d, want 1 (the refused Stack):\n%s", code, log)
	}
	want[StatusContextPrefix+"dev/prod"], want[StatusContextPrefix+"dev/flux"] = "success", "success"
	if got := w.finalStatuses(head1); !equal(got, want) {
		t.Fatalf("not-previewed success: statuses %v, want %v", got, want)
	}

	// The next push keeps only the fluxSource Stack: the others' sections go.
	c.NotPreviewed = "failure"
	c.HeadSHA = repo.Commit(t, "restore prod, drop inject", map[string]string{"stacks/prod.yaml": prod, "stacks/inject.yaml": ""})
	if code, log := w.run(t, c); code != 1 {
		t.Fatalf("flux only: exit %d:\n%s", code, log)
	}
	cs := w.gh.Comments("acme", "infra", 5)
	if got := strings.Join(sectionKeys(cs[0].Body), " "); len(cs) != 1 || got != "dev/flux" {
		t.Fatalf("flux only: %d comments, sections %q:\n%s", len(cs), got, cs[0].Body)
	}

	// The last push reverts everything: the comment says nothing changes.
	c.HeadSHA = repo.Commit(t, "revert", map[string]string{"stacks/flux.yaml": ""})
	if code, log := w.run(t, c); code != 0 || strings.Contains(log, "::warning::") {
		t.Fatalf("reverted: exit %d:\n%s", code, log)
	}
	cs = w.gh.Comments("acme", "infra", 5)
	if len(cs) != 1 || len(sectionKeys(cs[0].Body)) != 0 || !strings.Contains(cs[0].Body, "Nothing changes") {
		t.Fatalf("reverted: %d comments:\n%s", len(cs), cs[0].Body)
	}
	w.noGetUser(t)
}

func sectionKeys(body string) []string {
	var ks []string
	for _, p := range report.Sections(body) {
		ks = append(ks, p.Key)
	}
	return ks
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestStatusContext(t *testing.T) {
	if got := StatusContext("web/dev"); got != "stackflow/preview/web/dev" {
		t.Errorf("StatusContext = %q", got)
	}
	a, b := StatusContext(strings.Repeat("ü", 300)+"a"), StatusContext(strings.Repeat("ü", 300)+"b")
	if a == b || len([]rune(a)) != maxContext || len([]rune(b)) != maxContext || !strings.HasPrefix(a, StatusContextPrefix) {
		t.Errorf("long contexts %q (%d), %q (%d)", a, len([]rune(a)), b, len([]rune(b)))
	}
}

// TestStatusContextsPerProject: two projects' dev stacks, previewed by two
// jobs of one pull request, one failing: each keeps its own status, so the
// other's success never overwrites the failure.
func TestStatusContextsPerProject(t *testing.T) {
	w := newWorld(t)
	w.programBase(t, map[string]string{"web/Pulumi.yaml": program, "api/Pulumi.yaml": strings.Replace(program, "name: web", "name: api", 1)})
	for _, p := range []struct{ dir, src, settings string }{
		{"web", program, "config:\n  web:failOn: bogus\n"}, // the provider refuses it
		{"api", strings.Replace(program, "name: web", "name: api", 1), ""},
	} {
		dir := filepath.Join(w.ws, p.dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), []byte(p.src), 0o644); err != nil {
			t.Fatal(err)
		}
		if p.settings != "" {
			if err := os.WriteFile(filepath.Join(dir, "Pulumi.dev.yaml"), []byte(p.settings), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, dir := range []string{"web", "api"} { // the failing job first
		c := w.config(t, inputs.ModeProgram, rwToken)
		c.WorkDir, c.Stacks = dir, []string{"dev"}
		w.run(t, c)
	}
	want := map[string]string{StatusContextPrefix + "web/dev": "failure", StatusContextPrefix + "api/dev": "success"}
	if got := w.finalStatuses(headSHA); !equal(got, want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	body := w.gh.Comments("acme", "infra", 5)[0].Body
	if got := strings.Join(sectionKeys(body), " "); got != "api/dev web/dev" {
		t.Fatalf("sections %q", got)
	}
}
