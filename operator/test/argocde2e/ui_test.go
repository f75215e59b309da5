package argocde2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/test/framework/argocd"
	"github.com/stackflow-io/stackflow/test/framework/browser"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// EnvScreenshots names the directory the UI test writes the screenshots the
// docs use into; `make screenshots` sets it to docs/images. Unset, they go to
// the test's temporary directory (and are checked all the same).
const EnvScreenshots = "STACKFLOW_SCREENSHOTS"

// uiState is a state of a Stack as a person sees it in Argo CD's UI: the
// health the resource tree's icon shows, a part of the message its icon's
// title and its details panel show, and the screenshot of that panel the
// docs show.
type uiState struct {
	health, message, screenshot string
}

// uiStates are the states docs/argocd.md shows; TestStackInArgoCDUI checks
// the page against each, and the docs name each screenshot with its health
// and message (uiCaption), so a page that no longer says what the docs say
// fails the test.
var uiStates = []uiState{
	{"Progressing", "Running up ", "argocd-ui-progressing.png"},
	{"Healthy", "Last up succeeded at ", "argocd-ui-healthy.png"},
	{"Suspended", "awaiting approval: ", "argocd-ui-suspended.png"},
	{"Degraded", "failOn=update", "argocd-ui-degraded.png"},
}

// uiTree is the screenshot of the resource tree (the README's).
const uiTree = "argocd-ui-tree.png"

// uiCaption is how docs/argocd.md names a state's screenshot: its image's
// alternative text.
func uiCaption(s uiState) string {
	return fmt.Sprintf("![%s: “%s”](images/%s)", s.health, strings.TrimSpace(s.message), s.screenshot)
}

// uiPolicy lets alice see Applications and run the Stack's actions.
const uiPolicy = `p, role:operator, applications, get, */*, allow
p, role:operator, applications, action/pulumi.com/Stack/*, */*, allow
g, alice, role:operator
`

// TestStackInArgoCDUI looks at Stacks the way a person does: Argo CD v3's
// own web UI, built from its source and embedded in the real API server,
// in headless Chromium. alice signs in with the login form, opens the
// Application and finds its two Stacks in the resource tree: web, whose
// first update is seen running (Progressing, a spinning icon, "Running up …"
// in its details), then Healthy at the commit; gated, whose plan awaits
// approval (Suspended, with the plan's summary). Each running update is
// held by the test provider until the page has shown it, so a slow machine
// cannot make the test miss it. From the node's Actions
// menu she approves gated's plan (it then applies: Healthy) and runs
// "Reconcile now" on web (a new update runs, seen Progressing, then
// Healthy). A failing commit makes web Degraded with the error. Each state's
// details panel is captured as a screenshot, and docs/argocd.md must show
// each with the health and message the page showed.
func TestStackInArgoCDUI(t *testing.T) {
	build := argocd.LocateOrSkip(t, argocd.V3)
	if !build.UI {
		t.Fatalf("Argo CD %s is built without its web UI: run ./hack/substrate.sh argocd3 (it needs ../shared/argo-ui)", build.Version)
	}
	chromium := browser.LocateOrSkip(t)
	// A failing wait's screenshot goes to STACKFLOW_BROWSER_ARTIFACTS (kept
	// after the test) when set.
	artifacts := os.Getenv("STACKFLOW_BROWSER_ARTIFACTS")
	if artifacts == "" {
		artifacts = t.TempDir()
	}
	shots := os.Getenv(EnvScreenshots)
	if shots == "" {
		shots = t.TempDir()
	}
	checkDocsShowStates(t)

	e := startArgo(t, argocd.V3, func(o *argocd.Options) {
		o.Accounts = map[string]string{"alice": "alice-password"}
		o.RBACPolicy = uiPolicy
		o.TLS = true
	})
	argo, c := e.argo, e.c
	ctx := context.Background()
	// web's updates run until the page has shown them.
	hold := newUpdateHold(t)
	ns, pe := e.approvalNamespace(t, hold.agentEnv())
	if _, err := argo.CheckUI(ctx); err != nil {
		t.Fatal(err)
	}

	r := serveRepos(t)
	sha1 := r.prog.Commit(t, "v1", map[string]string{"Pulumi.yaml": program("v1", "")})
	r.manifests.Commit(t, "app", map[string]string{
		// web refreshes before each update, so a Reconcile now that changes
		// nothing still reads its record: a held step the page can show.
		"app/web.yaml":   uiStack(ns, "web", r.prog, "  refresh: true\n"),
		"app/gated.yaml": uiStack(ns, "gated", r.prog, "  approval:\n    required: true\n"),
	})
	app := application("ui-"+ns, ns, r.manifestsURL())
	hold.hold(t)
	if err := c.Create(ctx, app); err != nil {
		t.Fatal(err)
	}

	// Chromium waits up to 45 s for what a sync and an update take here.
	page := browser.Start(t, browser.Options{Binary: chromium, Width: 1280, Height: 1024, Timeout: 45 * time.Second, ArtifactDir: artifacts, IgnoreCertErrors: true})
	page.Navigate(argo.APIURL + "/login")
	page.SetValue("input[name=username]", "alice")
	page.SetValue("input[name=password]", "alice-password")
	page.ClickText("Sign In")
	// The Applications page lists the Application; a click opens it.
	page.ClickText(app.Name)
	page.WaitVisible(".application-resource-tree")

	web, gated := stackNode(ns, "web"), stackNode(ns, "gated")
	// details opens a Stack's details panel until its health details show
	// the state's message (the panel reads them once, when it opens, and
	// the tree's spinning icon carries no message), screenshots it, and
	// closes it.
	details := func(node string, s uiState, extra string) {
		t.Helper()
		want := s.message + extra
		deadline := time.Now().Add(45 * time.Second)
		for {
			page.Click(node + " .application-resource-tree__node-kind-icon")
			page.WaitText(".sliding-panel", "HEALTH DETAILS")
			if page.HasText(".sliding-panel", want) || time.Now().After(deadline) {
				break
			}
			page.Click(".sliding-panel__close")
			page.WaitHidden(".sliding-panel__wrapper")
			<-time.After(time.Second) // between looks, not a negative check
		}
		page.WaitText(".sliding-panel", want) // past the deadline, fails saying what it shows
		page.Screenshot(filepath.Join(shots, s.screenshot))
		page.Click(".sliding-panel__close")
		page.WaitHidden(".sliding-panel__wrapper")
	}

	// 1. web's first update, running: a spinning icon, "Running up <update>
	//    for <commit>" in its details. Held until seen.
	page.WaitVisible(web + " svg.spin[qe-id=utils-health-status-title]")
	details(web, uiStates[0], "")
	t.Logf("seen: web Progressing")
	hold.release(t)

	// 2. web Healthy at the commit; the tree as a person sees it.
	page.WaitVisible(healthIcon(web, "Healthy", uiStates[1].message+sha1[:7]))
	details(web, uiStates[1], sha1[:7])
	t.Logf("seen: web Healthy at %.7s", sha1)

	// 3. gated awaits approval of its plan: Suspended, with the summary.
	page.WaitVisible(healthIcon(gated, "Suspended", uiStates[2].message+"+1 ~0 -0, plan "))
	page.Screenshot(filepath.Join(shots, uiTree))
	details(gated, uiStates[2], "+1 ~0 -0")
	t.Logf("seen: gated Suspended awaiting approval")

	// 4. alice approves the plan from gated's Actions menu; it applies.
	runAction(page, gated, "Approve plan +1 ~0 -0")
	page.WaitVisible(healthIcon(gated, "Healthy", uiStates[1].message+sha1[:7]))
	if rec, ok := pe.Record(t, "gated-"+ns); !ok || rec != "v1" {
		t.Fatalf("gated's record %q, %v after the approval in the UI", rec, ok)
	}
	t.Logf("seen: gated approved from the Actions menu, then Healthy")

	// 5. Reconcile now, from web's Actions menu: a new update runs.
	stack := &pulumiv1.Stack{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, stack); err != nil {
		t.Fatal(err)
	}
	before := stack.Status.LastUpdate.Name
	hold.hold(t)
	runAction(page, web, "Reconcile now")
	page.WaitVisible(web + " svg.spin[qe-id=utils-health-status-title]")
	hold.release(t)
	page.WaitVisible(healthIcon(web, "Healthy", uiStates[1].message+sha1[:7]))
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, stack); err != nil {
		t.Fatal(err)
	}
	if stack.Status.LastUpdate.Name == before {
		t.Fatalf("after Reconcile now the page showed web running and Healthy, but its last update is still %s", before)
	}
	t.Logf("seen: Reconcile now ran update %s", stack.Status.LastUpdate.Name)

	// 6. A failing commit: web Degraded, with the error.
	r.prog.Commit(t, "v2 fails", map[string]string{"Pulumi.yaml": program("v2", "update")})
	page.WaitVisible(healthIcon(web, "Degraded", uiStates[3].message))
	details(web, uiStates[3], "")
	t.Logf("seen: web Degraded by the failing commit")
	t.Logf("screenshots in %s", shots)
}

// uiStack is a Stack manifest of the UI test's Application.
func uiStack(ns, name string, prog *gitrepo.Repo, extra string) string {
	return fmt.Sprintf(`apiVersion: pulumi.com/v1
kind: Stack
metadata:
  name: %s
  namespace: %s
spec:
  stack: %s-%s
  projectRepo: %s
  branch: main
  retryMaxBackoffDurationSeconds: 2
%s`, name, ns, name, ns, prog.URL(), extra)
}

// stackNode is the CSS selector of a Stack's node in the resource tree
// (its title describes the node: kind, namespace, name).
func stackNode(ns, name string) string {
	return fmt.Sprintf(`.application-resource-tree__node[title^="Kind: Stack"][title*="Namespace: %s"][title$="Name: %s"]`, ns, name)
}

// healthIcon is the selector of a node's health icon showing health and a
// message holding part (the icon's title is "<health>: <message>").
func healthIcon(node, health, part string) string {
	return fmt.Sprintf(`%s i[qe-id=utils-health-status-title][title^=%q][title*=%q]`, node, health+": ", part)
}

// runAction runs a resource action from a node's Actions menu (its ⋮
// button), confirming the prompt, as a person does.
func runAction(page *browser.Page, node, title string) {
	page.Click(node + " .application-resource-tree__node-menu button")
	page.ClickText(title)
	page.Click("[qe-id=prompt-popup-ok-button]")
}

// checkDocsShowStates checks that docs/argocd.md shows each state's
// screenshot named by its health and message, and the tree's, and that the
// images are committed.
func checkDocsShowStates(t *testing.T) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(substrate.RepoRoot(), "docs", "argocd.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range uiStates {
		if !strings.Contains(string(doc), uiCaption(s)) {
			t.Errorf("docs/argocd.md does not show the %s state as the page does: want %s", s.health, uiCaption(s))
		}
	}
	files := []string{uiTree}
	for _, s := range uiStates {
		files = append(files, s.screenshot)
	}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(substrate.RepoRoot(), "docs", "images", f)); err != nil {
			t.Errorf("docs/images/%s: %v (make screenshots writes it)", f, err)
		}
		if !regexp.MustCompile(`\(images/` + regexp.QuoteMeta(f) + `\)`).Match(doc) {
			t.Errorf("docs/argocd.md does not show images/%s", f)
		}
	}
}
