package kargoe2e

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/stackflow-io/stackflow/analysis/service"
	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/local"
	"github.com/stackflow-io/stackflow/test/framework/argocd"
	"github.com/stackflow-io/stackflow/test/framework/fakegithub"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/kargo"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

const (
	// githubToken is the one token the GitHub server accepts (git and API):
	// the password of Kargo's git credentials and of Argo CD's repository.
	githubToken = "ghp_stackflowKargoE2E0123456789abcdef0123"
	// programProject is the program's Pulumi project (the backend's history
	// is kept per project and stack).
	programProject = "web"
)

// program is release n of the Pulumi program the Warehouse watches
// (programs/web): one record of the test provider, failing on update when
// broken.
func program(n int, broken bool) string {
	failOn := ""
	if broken {
		failOn = "update"
	}
	return fmt.Sprintf(`name: %s
runtime: yaml
description: release %d
resources:
  site:
    type: stackflowtest:index:Record
    properties:
      name: web-${pulumi.stack}
      content: release %d
      failOn: "%s"
outputs:
  content: ${site.content}
`, programProject, n, n, failOn)
}

// renamed is release n of the program with its record renamed (resource
// page, record web-<stack>-page): a plan that creates one record and
// deletes the other.
func renamed(n int) string {
	return fmt.Sprintf(`name: %s
runtime: yaml
description: release %d
resources:
  page:
    type: stackflowtest:index:Record
    properties:
      name: web-${pulumi.stack}-page
      content: release %d
outputs:
  content: ${page.content}
`, programProject, n, n)
}

// pipeline is the running example: examples/kargo set up on Kargo, its
// program repository, and the Stackflow side (operator, analysis service).
type pipeline struct {
	*kargo.Pipeline
	t       *testing.T
	pe      *substrate.Pulumi
	program *gitrepo.Repo
	start   time.Time
	// tl, when set, records the pipeline's milestones (timeline_test.go).
	tl *timeline
}

// engineTime is the engine's own time for commit in the stage's stack.
func (p *pipeline) engineTime(stage, commit string) time.Duration {
	return engineTime(p.t, p.pe.Backend, programProject, stage, commit)
}

// TestKargoPromotesStacks runs examples/kargo with the real Kargo: the shipped
// ClusterPromotionTasks, ClusterAnalysisTemplates and the example's objects
// unmodified but for the repository URLs, against the real Argo CD, Argo
// Rollouts' analysis controller, the operator and the analysis service.
//
//   - Release 1, committed to the program repository, becomes Freight of the
//     Warehouse; Kargo auto-promotes it into dev and preview with
//     stackflow-promote (clone, yaml-update of spec.commit, commit, push with
//     the project's git credentials, argocd-update, the http wait on the
//     analysis service); each Stack runs the commit; Kargo verifies the
//     Freight with AnalysisRuns of the shipped ClusterAnalysisTemplates, run
//     to Successful by Argo Rollouts.
//   - test: a user creates a Promotion; it applies and verifies like dev.
//   - prod: a user creates a Promotion; stackflow-promote-pr pushes a branch
//     and opens a pull request on the GitHub Enterprise server; the Promotion
//     waits, Running, until a reviewer merges it; Argo CD syncs the merge
//     commit and the Stack applies it.
//   - Release 2 is broken: its dev Promotion fails with the analysis
//     service's reason, the Freight is not verified in dev, and Kargo refuses
//     a Promotion of it into test ("not available").
//   - Two Stages of the test's own make a user's mistakes
//     (wrongstack_test.go): one waits for a Stack the cluster never gets, and
//     its Promotion fails with StackNotFound once its stackNotFoundGrace is
//     over; the other has a mistyped stackName, and its Promotion is refused
//     before any commit, naming both Stacks.
//
// Each commit is applied once per stage, per the Pulumi backend's history.
func TestKargoPromotesStacks(t *testing.T) {
	if skipReason != "" {
		t.Skip(skipReason)
	}
	ctx := context.Background()
	p := &pipeline{t: t, pe: substrate.NewPulumi(t)}
	r1 := p.setUp(ctx)
	tl := &timeline{}
	tl.record(t, p.Pipeline)
	p.tl = tl

	// Release 1: Freight, then dev and preview by auto-promotion.
	f1 := p.waitFreight(ctx, r1, 2*time.Minute)
	t.Logf("release 1 %.7s is Freight %s (%s)", r1, f1.Name, f1.Alias)
	// Into the Stage whose Stack never appears, now: it fails on its own
	// time, checked after prod.
	if _, err := p.Promote(ctx, absentStage, f1.Name); err != nil {
		t.Fatal(err)
	}
	for _, st := range []string{"dev", "preview"} {
		promo := p.waitPromotion(ctx, st, f1.Name, "Succeeded", 4*time.Minute)
		p.checkSteps(promo, promoteSteps...)
		p.sameAsKargo(ctx, promo, f1)
	}
	p.waitVerified(ctx, f1.Name, 3*time.Minute, "dev", "preview")
	p.stackRan(ctx, "web-dev", r1, autov1alpha1.UpType)
	p.stackRan(ctx, "web-preview", r1, autov1alpha1.PreviewType)
	p.verifiedByRollouts(ctx, "dev", r1)
	p.verifiedByRollouts(ctx, "preview", r1, "deletes-nothing")
	t.Logf("release 1 applied and verified in dev and previewed in preview after %s", time.Since(p.start).Round(100*time.Millisecond))

	// test: promoted by a person, as `kargo promote` or the UI does.
	testStart := time.Now()
	testPromo, err := p.Promote(ctx, "test", f1.Name)
	if err != nil {
		t.Fatal(err)
	}
	p.sameAsKargo(ctx, p.waitPromotion(ctx, "test", f1.Name, "Succeeded", 3*time.Minute), f1)
	p.waitVerified(ctx, f1.Name, 2*time.Minute, "test")
	p.stackRan(ctx, "web-test", r1, autov1alpha1.UpType)
	p.verifiedByRollouts(ctx, "test", r1)
	t.Logf("test: Promotion %s Succeeded and verified after %s", testPromo, time.Since(p.start).Round(100*time.Millisecond))

	// prod: through a pull request that a reviewer merges.
	merged := p.prodThroughPullRequest(ctx, f1, r1)
	p.absentStackFailsAfterTheGrace(ctx, f1.Name)
	// Release 1 was committed before the Warehouse existed: its clock starts
	// when the Warehouse was applied.
	tl.report(t, "release 1", r1, p.start, f1.Name, map[string]time.Time{"dev": {}, "preview": {}, "test": testStart, "prod": merged},
		p.engineTime)

	// Release 2 is broken: its dev promotion fails with the service's reason.
	r2 := p.program.Commit(t, "Release 2: breaks on update", map[string]string{"programs/web/Pulumi.yaml": program(2, true)})
	pushed := time.Now()
	// A push webhook would do this (Kargo's receivers refresh the Warehouses
	// subscribed to the repository); the Warehouse's own interval is 5 min.
	if err := p.Refresh(ctx, kargo.WarehouseKind, kargo.ExampleWarehouse); err != nil {
		t.Fatal(err)
	}
	f2 := p.waitFreight(ctx, r2, 2*time.Minute) // well inside the 5-min interval
	tl.settle()
	if ft, ok := tl.get(freightMade(r2)); ok {
		t.Logf("latency of release 2 (%.7s): push → Freight %s (the Warehouse refreshed as a push webhook does)", r2, ft.Sub(pushed).Round(100*time.Millisecond))
	}
	failed := p.waitPromotion(ctx, "dev", f2.Name, "Failed", 4*time.Minute)
	if !strings.Contains(failed.Status.Message, "StackStalled") {
		t.Errorf("the dev Promotion of release 2 failed with %q, want the analysis service's reason StackStalled", failed.Status.Message)
	}
	t.Logf("release 2 %.7s: dev Promotion %s Failed: %s", r2, failed.Name, failed.Status.Message)
	if f, err := p.Freight(ctx, f2.Name); err != nil || f.VerifiedIn("dev") {
		t.Errorf("the broken Freight %s is verified in dev (err %v)", f2.Name, err)
	}
	// test takes Freight verified in dev and preview: Kargo refuses it.
	if _, err := p.Promote(ctx, "test", f2.Name); err == nil || !strings.Contains(err.Error(), "not available to this Stage") {
		t.Errorf("a Promotion of the broken Freight %s into test: %v, want Kargo's refusal: not available to this Stage", f2.Name, err)
	}
	// A Stage with a mistyped stackName and test's stackFile takes it
	// (its Freight comes directly from the Warehouse): refused before any
	// commit, so web-test keeps release 1.
	p.typoIsRefusedBeforeAnyCommit(ctx, f2.Name, r1)

	// dev's push of release 2 moved the manifests branch past the commits
	// that test's and prod's promotions made: their Stages stay Healthy
	// (no desired revision pins them to a commit that is no longer the
	// branch's head).
	for _, name := range []string{"test", "prod"} {
		substrate.Eventually(t, time.Minute, "Stage "+name+" Healthy after dev's push of release 2", func() (bool, error) {
			st, err := p.Stage(ctx, name)
			if err != nil || st.Status.Health == nil {
				return false, err
			}
			return st.Status.Health.Status == "Healthy", fmt.Errorf("health %s %q", st.Status.Health.Status, st.Status.Health.Issues)
		})
	}

	// Release 3 renames the record: its plan deletes one. dev applies it,
	// preview's verification stops it; approved for prod by hand, prod's
	// denyOn: delete fails its Promotion before anyone can approve, and prod
	// keeps release 1.
	r3 := p.deletingReleaseStopsBeforeProd(ctx)

	// Each commit applied once per stage: release 1 in dev, test and prod,
	// release 3 in dev; release 2 nowhere.
	for _, stack := range []string{"dev", "test", "prod"} {
		appliedOnce(t, p.pe.Backend, programProject, stack, r1)
		if stack == "dev" {
			appliedOnce(t, p.pe.Backend, programProject, stack, r3)
		}
		for _, u := range backendHistory(t, p.pe.Backend, programProject, stack) {
			if u.Kind == "update" && u.Result == "succeeded" && (u.Head == r2 || stack != "dev" && u.Head == r3) {
				t.Errorf("stack %s applied %.7s", stack, u.Head)
			}
		}
	}
	t.Logf("whole pipeline in %s", time.Since(p.start).Round(100*time.Millisecond))
}

// setUp makes the program repository, starts the operator and the analysis
// service, sets examples/kargo up (kargo.StartPipeline) and returns release
// 1's commit; it applies the Warehouse last, once everything a promotion
// needs is in place, and starts the clock there.
func (p *pipeline) setUp(ctx context.Context) string {
	t := p.t
	// The program repository, on loopback, public (the Warehouse reads it
	// without credentials).
	var srv *gitrepo.HTTPServer
	p.program, srv = gitrepo.NewServedHTTP(t, "infra.git", nil)
	r1 := p.program.Commit(t, "Release 1", map[string]string{"programs/web/Pulumi.yaml": program(1, false)})

	root := t.TempDir()
	t.Cleanup(func() { local.StopAll(root) })
	operatortest.StartOperator(t, cp.Config, operator.Options{
		Runtime: operator.RuntimeLocal, LocalRoot: root, AgentBinary: agentBin,
		PulumiRoot: p.pe.Paths.PulumiRoot, AgentEnv: p.pe.EnvVars(), WorkspaceWorkers: 4, UpdateWorkers: 4, StackWorkers: 4,
		ArtifactDir: t.TempDir(), StackResyncOverride: time.Second, WatchNamespaces: []string{kargo.ExampleStackNamespace},
	})
	var err error
	p.Pipeline, err = kargo.StartPipeline(ctx, kargo.PipelineOptions{Client: c, Config: cp.Config, RepoRoot: substrate.RepoRoot(),
		Dir: t.TempDir(), Proxy: proxy, ProgramURL: p.program.HTTPURL(srv), AnalysisAddr: startAnalysis(t),
		GitHubToken: githubToken, RetryCap: 2, Manifests: extraManifests(), Say: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	p.applyMistakenStages(ctx, p.program.HTTPURL(srv))
	t.Cleanup(p.Close)
	t.Cleanup(func() {
		if t.Failed() {
			p.logState(context.Background())
		}
	})
	p.start = time.Now()
	if err := p.StartWarehouse(ctx); err != nil {
		t.Fatal(err)
	}
	return r1
}

// logState logs what Kargo and Argo CD say of each Stage: for a failure's
// diagnosis, as `kubectl get stages,applications -o yaml` would show it.
func (p *pipeline) logState(ctx context.Context) {
	for _, name := range kargo.ExampleStages {
		st, err := p.Stage(ctx, name)
		if err != nil {
			p.t.Logf("Stage %s: %v", name, err)
			continue
		}
		line := fmt.Sprintf("Stage %s: Freight %q", name, st.CurrentFreight())
		if h := st.Status.Health; h != nil {
			line += fmt.Sprintf(", health %s %q", h.Status, h.Issues)
		}
		if lp := st.Status.LastPromotion; lp != nil {
			line += fmt.Sprintf(", last Promotion %s %s %q", lp.Name, lp.Status.Phase, lp.Status.Message)
		}
		if v := st.LastVerification(); v != nil {
			line += fmt.Sprintf(", verification %s %q", v.Phase, v.Message)
		}
		app := &unstructured.Unstructured{}
		app.SetAPIVersion("argoproj.io/v1alpha1")
		app.SetKind("Application")
		if err := c.Get(ctx, types.NamespacedName{Namespace: argocd.Namespace, Name: "kargo-demo-" + name}, app); err == nil {
			sync, _, _ := unstructured.NestedString(app.Object, "status", "sync", "status")
			rev, _, _ := unstructured.NestedString(app.Object, "status", "sync", "revision")
			health, _, _ := unstructured.NestedString(app.Object, "status", "health", "status")
			line += fmt.Sprintf("; Application %s %.7s %s", sync, rev, health)
		}
		p.t.Log(line)
	}
}

// waitFreight waits until the Warehouse has made Freight of commit sha.
func (p *pipeline) waitFreight(ctx context.Context, sha string, timeout time.Duration) *kargo.Freight {
	p.t.Helper()
	var f *kargo.Freight
	substrate.Eventually(p.t, timeout, fmt.Sprintf("Freight of commit %.7s", sha), func() (bool, error) {
		var err error
		f, err = p.FreightOf(ctx, sha)
		return f != nil, err
	})
	return f
}

// waitPromotion waits until the newest Promotion of the Freight into the
// Stage is in phase want, failing at once when it ends in another.
func (p *pipeline) waitPromotion(ctx context.Context, stage, freight, want string, timeout time.Duration) *kargo.Promotion {
	p.t.Helper()
	var promo *kargo.Promotion
	substrate.Eventually(p.t, timeout, fmt.Sprintf("a Promotion of %s into %s to be %s", freight, stage, want), func() (bool, error) {
		var err error
		if promo, err = p.PromotionOf(ctx, stage, freight); err != nil || promo == nil {
			return false, err
		}
		if promo.Status.Phase == want {
			return true, nil
		}
		if promo.Terminal() {
			p.t.Fatalf("Promotion %s of %s into %s ended %s, want %s: %s", promo.Name, freight, stage, promo.Status.Phase, want, promo.Status.Message)
		}
		return false, fmt.Errorf("Promotion %s is %s at step %d (%s): %s", promo.Name, promo.Status.Phase, promo.Status.CurrentStep, promo.CurrentStepUses(), promo.Status.Message)
	})
	return promo
}

// promoteSteps are the steps of stackflow-promote.
var promoteSteps = []string{"fail", "git-clone", "yaml-parse", "fail", "yaml-update", "git-commit", "git-push", "argocd-update",
	"compose-output", "http", "http", "http", "compose-output"}

// checkSteps checks the Promotion ran the task's steps, inflated by Kargo
// from the Stage's task reference, each Succeeded but the checks (fail
// steps), each Skipped, and the step approval, Skipped unless the plan
// awaited approval.
func (p *pipeline) checkSteps(promo *kargo.Promotion, uses ...string) {
	p.t.Helper()
	var got []string
	for _, s := range promo.Spec.Steps {
		got = append(got, s.Uses)
	}
	if strings.Join(got, ",") != strings.Join(uses, ",") {
		p.t.Errorf("Promotion %s ran steps %v, want %v", promo.Name, got, uses)
		return
	}
	// The step approval runs only for a plan that awaited approval.
	plan, _ := promo.Status.State["promote::plan"].(map[string]any)
	awaited := plan != nil && plan["awaitingApproval"] == true
	for i, m := range promo.Status.StepMeta {
		skipped := uses[i] == "fail" || m.Alias == "promote::approval" && !awaited
		if want := map[bool]string{true: "Skipped", false: "Succeeded"}[skipped]; m.Status != want {
			p.t.Errorf("Promotion %s step %d (%s) ended %s, want %s: %s", promo.Name, i, uses[i], m.Status, want, m.Message)
		}
	}
}

// waitVerified waits until the Freight is verified in each Stage.
func (p *pipeline) waitVerified(ctx context.Context, freight string, timeout time.Duration, stages ...string) {
	p.t.Helper()
	substrate.Eventually(p.t, timeout, fmt.Sprintf("Freight %s verified in %v", freight, stages), func() (bool, error) {
		f, err := p.Freight(ctx, freight)
		if err != nil {
			return false, err
		}
		for _, st := range stages {
			if !f.VerifiedIn(st) {
				return false, fmt.Errorf("not verified in %s", st)
			}
		}
		return true, nil
	})
}

// stackRan checks that the Stack is pinned to the commit (by the promotion,
// synced by Argo CD) and that its last update, of that type, succeeded
// there (lastSuccessfulCommit is that of the last successful up, so a
// preview is read from lastAttemptedCommit).
func (p *pipeline) stackRan(ctx context.Context, name, commit string, typ autov1alpha1.UpdateType) {
	p.t.Helper()
	s := &pulumiv1.Stack{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: kargo.ExampleStackNamespace, Name: name}, s); err != nil {
		p.t.Fatal(err)
	}
	if s.Spec.Commit != commit {
		p.t.Errorf("Stack %s: spec.commit %q, want %s", name, s.Spec.Commit, commit)
	}
	lu := s.Status.LastUpdate
	if lu == nil || lu.LastAttemptedCommit != commit || lu.Type != typ || lu.State != pulumiv1.SucceededStackStateMessage ||
		typ == autov1alpha1.UpType && lu.LastSuccessfulCommit != commit {
		p.t.Errorf("Stack %s: last update %+v, want a succeeded %s of %.7s", name, lu, typ, commit)
	}
}

// verifiedByRollouts checks that the Stage's verification of its current
// Freight was an AnalysisRun that Argo Rollouts' controller ran to
// Successful, every metric measured (both of the shipped template, and the
// Stage's own ones), about the Stage's Stack at the commit, asking the
// analysis service at the templates' default address.
func (p *pipeline) verifiedByRollouts(ctx context.Context, stage, commit string, metrics ...string) {
	t := p.t
	t.Helper()
	st, err := p.Stage(ctx, stage)
	if err != nil {
		t.Fatal(err)
	}
	v := st.LastVerification()
	if v == nil || v.Phase != "Successful" || v.AnalysisRun == nil {
		t.Fatalf("Stage %s: verification %+v, want Successful with an AnalysisRun", stage, v)
	}
	run, err := p.Get(ctx, kargo.AnalysisRunKind, v.AnalysisRun.Name)
	if err != nil {
		t.Fatal(err)
	}
	phase, _, _ := unstructured.NestedString(run.Object, "status", "phase")
	results, _, _ := unstructured.NestedSlice(run.Object, "status", "metricResults")
	var measured []string
	for _, r := range results {
		m, _ := r.(map[string]any)
		if n, _ := m["successful"].(int64); n > 0 {
			measured = append(measured, fmt.Sprint(m["name"]))
		}
	}
	sort.Strings(measured)
	want := append([]string{"deadline", "verified"}, metrics...)
	sort.Strings(want)
	if phase != "Successful" || strings.Join(measured, ",") != strings.Join(want, ",") {
		t.Errorf("AnalysisRun %s (Stage %s): phase %s, successful metrics %v, want Successful with %v measured", run.GetName(), stage, phase, measured, want)
	}
	args := map[string]string{}
	list, _, _ := unstructured.NestedSlice(run.Object, "spec", "args")
	for _, a := range list {
		m, _ := a.(map[string]any)
		if v, ok := m["value"].(string); ok {
			args[fmt.Sprint(m["name"])] = v
		}
	}
	for name, want := range map[string]string{"namespace": kargo.ExampleStackNamespace, "stack": "web-" + stage, "commit": commit, "server": "http://" + kargo.AnalysisHost} {
		if args[name] != want {
			t.Errorf("AnalysisRun %s (Stage %s): arg %s = %q, want %q", run.GetName(), stage, name, args[name], want)
		}
	}
	t.Logf("Stage %s verified by AnalysisRun %s, run to %s by Argo Rollouts", stage, run.GetName(), phase)
}

// prodThroughPullRequest promotes the Freight into prod: the Promotion opens
// a pull request and waits; a reviewer merges it; Argo CD syncs the merge
// commit and the Stack applies it.
//
// It returns when the pull request was merged.
func (p *pipeline) prodThroughPullRequest(ctx context.Context, f *kargo.Freight, commit string) time.Time {
	t := p.t
	freight := f.Name
	name, err := p.Promote(ctx, "prod", freight)
	if err != nil {
		t.Fatal(err)
	}
	var pr fakegithub.PullRequest
	substrate.Eventually(t, 2*time.Minute, "the prod Promotion to open a pull request", func() (bool, error) {
		prs := p.GitHub.Pulls(kargo.ManifestsOwner, kargo.ManifestsRepo)
		if len(prs) == 0 {
			if promo, err := p.PromotionOf(ctx, "prod", freight); err == nil && promo != nil && promo.Terminal() {
				t.Fatalf("Promotion %s ended %s before opening a pull request: %s", promo.Name, promo.Status.Phase, promo.Status.Message)
			}
			return false, nil
		}
		pr = prs[0]
		return true, nil
	})
	if !pr.Open || pr.Base != "main" || !strings.HasPrefix(pr.Title, "prod: Stack kargo-demo-stacks/web-prod to "+commit[:7]) {
		t.Errorf("pull request %+v, want open into main, titled for web-prod at %.7s", pr, commit)
	}
	if running, err := p.PromotionOf(ctx, "prod", freight); err == nil && running != nil {
		if title := p.evaluate(ctx, running, f, "open-pr", "title"); title != pr.Title {
			t.Errorf("kargoexpr computes the pull request title %q; Kargo opened %q", title, pr.Title)
		}
		if body := p.evaluate(ctx, running, f, "open-pr", "description"); body != pr.Body {
			t.Errorf("kargoexpr computes the pull request description %q; Kargo wrote %q", body, pr.Body)
		}
	}
	// While the pull request is open, the Promotion waits in git-wait-for-pr
	// and nothing reaches prod.
	substrate.Eventually(t, time.Minute, "the prod Promotion to wait for the pull request", func() (bool, error) {
		promo, err := p.PromotionOf(ctx, "prod", freight)
		if err != nil || promo == nil {
			return false, err
		}
		return promo.Status.Phase == "Running" && promo.CurrentStepUses() == "git-wait-for-pr",
			fmt.Errorf("Promotion %s is %s at %s", promo.Name, promo.Status.Phase, promo.CurrentStepUses())
	})
	if err := c.Get(ctx, types.NamespacedName{Namespace: kargo.ExampleStackNamespace, Name: "web-prod"}, &pulumiv1.Stack{}); !apierrors.IsNotFound(err) {
		t.Fatalf("Stack web-prod exists before the pull request is merged (err %v)", err)
	}
	// The pull request carries the preview of web-prod at the Freight's
	// commit: Stackflow's GitHub Action, run on it in manifests mode (the
	// first deploy: it creates the stack and the record).
	p.previewPullRequest(ctx, pr, 2)
	merge, err := p.GitHub.Merge(ctx, kargo.ManifestsOwner, kargo.ManifestsRepo, pr.Number)
	if err != nil {
		t.Fatal(err)
	}
	merged := time.Now()
	// GitHub's pull_request webhook makes Kargo's receiver refresh the
	// Promotion waiting on it; without it, git-wait-for-pr polls every 30 s.
	if err := p.Refresh(ctx, kargo.PromotionKind, name); err != nil {
		t.Fatal(err)
	}
	// web-prod requires approval: the Promotion shows the plan (its step
	// plan's outputs) and waits at its step approval, Argo CD shows the Stack
	// Suspended with the same plan, and Argo CD's approve action, run
	// through its API as the UI does, approves it.
	fp := p.approveProdPlan(ctx, freight, commit)
	promo := p.waitPromotion(ctx, "prod", freight, "Succeeded", 3*time.Minute)
	p.checkSteps(promo, "fail", "git-clone", "yaml-parse", "fail", "yaml-update", "git-commit", "git-push", "git-open-pr", "git-wait-for-pr",
		"argocd-update", "compose-output", "http", "http", "http", "compose-output")
	s := &pulumiv1.Stack{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: kargo.ExampleStackNamespace, Name: "web-prod"}, s); err != nil {
		t.Fatal(err)
	}
	if pl := s.Status.Plan; pl == nil || pl.State != pulumiv1.PlanApplied || pl.Fingerprint != fp || pl.Approval == nil || pl.Approval.Approver != argocd.ServerServiceAccount {
		t.Fatalf("web-prod's plan after the Promotion: %+v, want %s applied, approved by Argo CD's identity", pl, fp)
	}
	p.waitVerified(ctx, freight, 2*time.Minute, "prod")
	p.stackRan(ctx, "web-prod", commit, autov1alpha1.UpType)
	p.verifiedByRollouts(ctx, "prod", commit)
	app := &unstructured.Unstructured{}
	app.SetAPIVersion("argoproj.io/v1alpha1")
	app.SetKind("Application")
	if err := c.Get(ctx, types.NamespacedName{Namespace: argocd.Namespace, Name: "kargo-demo-prod"}, app); err != nil {
		t.Fatal(err)
	}
	if rev, _, _ := unstructured.NestedString(app.Object, "status", "sync", "revision"); rev != merge {
		t.Errorf("Application kargo-demo-prod synced %q, want the merge commit %s", rev, merge)
	}
	t.Logf("prod: pull request #%d merged as %.7s; Promotion %s Succeeded and verified after %s", pr.Number, merge, promo.Name, time.Since(p.start).Round(100*time.Millisecond))
	return merged
}

// deletingReleaseStopsBeforeProd commits release 3, which renames the
// record. dev takes and applies it by itself; preview previews it against
// prod, and its verification (deletes-nothing) fails, so the pipeline does
// not offer it to test. Approved for prod by hand, as Kargo's hotfix path
// (`kargo approve`) does, its prod Promotion, through its merged pull
// request, fails with PlanDenied (denyOn: delete) while web-prod awaits
// approval of the deleting plan: nothing is applied to prod, which keeps
// release 1. It returns release 3's commit.
func (p *pipeline) deletingReleaseStopsBeforeProd(ctx context.Context) string {
	t := p.t
	r3 := p.program.Commit(t, "Release 3: renames the record", map[string]string{"programs/web/Pulumi.yaml": renamed(3)})
	pushed := time.Now()
	if err := p.Refresh(ctx, kargo.WarehouseKind, kargo.ExampleWarehouse); err != nil {
		t.Fatal(err)
	}
	f3 := p.waitFreight(ctx, r3, 2*time.Minute)
	for _, st := range []string{"dev", "preview"} {
		p.waitPromotion(ctx, st, f3.Name, "Succeeded", 4*time.Minute)
	}
	p.waitVerified(ctx, f3.Name, 3*time.Minute, "dev")
	// The path of a release into Stacks that exist (their agents check it
	// out in place), from the push (the Warehouse refreshed as a push
	// webhook does).
	if p.tl != nil {
		p.tl.report(t, "release 3", r3, pushed, f3.Name, map[string]time.Time{"dev": {}}, p.engineTime)
	}
	if _, ok := p.pe.Record(t, "web-dev"); ok {
		t.Fatal("dev applied release 3 but its old record is still there")
	}
	substrate.Eventually(t, 3*time.Minute, "preview's verification of release 3 failing on deletes-nothing", func() (bool, error) {
		st, err := p.Stage(ctx, "preview")
		if err != nil {
			return false, err
		}
		v := st.LastVerification()
		return v != nil && v.Phase == "Failed" && strings.Contains(v.Message, "deletes-nothing"), fmt.Errorf("verification %+v", v)
	})
	if err := p.ApproveFor(ctx, f3.Name, "prod"); err != nil {
		t.Fatal(err)
	}
	name, err := p.Promote(ctx, "prod", f3.Name)
	if err != nil {
		t.Fatal(err)
	}
	var pr fakegithub.PullRequest
	substrate.Eventually(t, 2*time.Minute, "the prod Promotion of release 3 to open a pull request", func() (bool, error) {
		for _, x := range p.GitHub.Pulls(kargo.ManifestsOwner, kargo.ManifestsRepo) {
			if x.Open {
				pr = x
				return true, nil
			}
		}
		return false, nil
	})
	if _, err := p.GitHub.Merge(ctx, kargo.ManifestsOwner, kargo.ManifestsRepo, pr.Number); err != nil {
		t.Fatal(err)
	}
	if err := p.Refresh(ctx, kargo.PromotionKind, name); err != nil {
		t.Fatal(err)
	}
	failed := p.waitPromotion(ctx, "prod", f3.Name, "Failed", 4*time.Minute)
	if msg := failed.Status.Message; !strings.Contains(msg, "PlanDenied") || !strings.Contains(msg, "1 to delete, which denyOn=delete refuses; nothing of it was applied") {
		t.Errorf("the prod Promotion of release 3 failed with %q, want PlanDenied naming the deletion", msg)
	}
	if _, status, _, _ := stepOf(failed, "plan"); status != "Failed" {
		t.Errorf("the prod Promotion failed at another step than plan (plan: %q): %s", status, failed.Status.Message)
	}
	s := &pulumiv1.Stack{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: kargo.ExampleStackNamespace, Name: "web-prod"}, s); err != nil {
		t.Fatal(err)
	}
	if pl := s.Status.Plan; pl == nil || pl.State != pulumiv1.PlanAwaitingApproval || pl.Commit != r3 || pl.Changes["delete"] != 1 {
		t.Errorf("web-prod's plan after the denial: %+v, want release 3's deleting plan awaiting approval", pl)
	}
	if got, ok := p.pe.Record(t, "web-prod"); !ok || got != "release 1" {
		t.Errorf("prod's record %q (%v) after the denied release 3, want release 1", got, ok)
	}
	if _, ok := p.pe.Record(t, "web-prod-page"); ok {
		t.Error("release 3's new record exists in prod")
	}
	t.Logf("release 3 %.7s: applied in dev, stopped by preview's deletes-nothing verification; approved for prod by hand, prod's Promotion %s Failed before any apply: %s", r3, failed.Name, failed.Status.Message)
	return r3
}

// approveProdPlan waits until the prod Promotion of the Freight waits for the
// approval of web-prod's plan of commit, showing it, and Argo CD shows the
// Stack Suspended with it; then approves it through Argo CD's API (the
// Stack's approve action, naming the fingerprint shown) and returns the
// fingerprint.
func (p *pipeline) approveProdPlan(ctx context.Context, freight, commit string) string {
	t := p.t
	var shown map[string]any
	substrate.Eventually(t, 3*time.Minute, "the prod Promotion waiting for the approval of web-prod's plan", func() (bool, error) {
		promo, err := p.PromotionOf(ctx, "prod", freight)
		if err != nil || promo == nil {
			return false, err
		}
		if promo.Terminal() {
			t.Fatalf("Promotion %s ended %s while web-prod awaits approval: %s", promo.Name, promo.Status.Phase, promo.Status.Message)
		}
		_, status, _, _ := stepOf(promo, "approval")
		shown, _ = promo.Status.State["promote::plan"].(map[string]any)
		return status == "Running" && shown != nil, fmt.Errorf("step approval %q, plan outputs %v (at %s)", status, shown, promo.CurrentStepUses())
	})
	fp, _ := shown["fingerprint"].(string)
	s := &pulumiv1.Stack{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: kargo.ExampleStackNamespace, Name: "web-prod"}, s); err != nil {
		t.Fatal(err)
	}
	if pl := s.Status.Plan; pl == nil || pl.Fingerprint != fp || pl.Commit != commit || shown["summary"] != pl.Summary || shown["awaitingApproval"] != true {
		t.Fatalf("the Promotion shows the plan %v; web-prod's is %+v (want it, of %.7s)", shown, pl, commit)
	}
	stackGVK := pulumiv1.GroupVersion.WithKind("Stack")
	substrate.Eventually(t, time.Minute, "Argo CD showing web-prod Suspended with the plan", func() (bool, error) {
		h, err := argo.ResourceHealth(ctx, "kargo-demo-prod", stackGVK.GroupKind(), kargo.ExampleStackNamespace, "web-prod")
		if err != nil || h == nil {
			return false, err
		}
		return h.Status == "Suspended" && strings.Contains(h.Message, "plan "+fp[:12]), fmt.Errorf("health %+v", h)
	})
	if h := backendHistory(t, p.pe.Backend, programProject, "prod"); len(h) != 0 {
		t.Fatalf("prod's backend history before the approval: %+v, want nothing applied", h)
	}
	if err := argo.RunActionV2(ctx, "kargo-demo-prod", stackGVK, kargo.ExampleStackNamespace, "web-prod", "approve", map[string]string{"fingerprint": fp}); err != nil {
		t.Fatalf("approve through Argo CD: %v", err)
	}
	t.Logf("prod: the Promotion showed plan %s (%v); approved through Argo CD's approve action", fp[:12], shown["summary"])
	return fp
}

// startAnalysis runs the analysis service in this process with Kubernetes
// authentication and returns its loopback address once its caches synced.
func startAnalysis(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- service.Run(ctx, service.Options{Auth: service.AuthKube, AuthCacheTTL: 10 * time.Second, Config: cp.Config,
			Listener: ln, Log: ctrl.Log.WithName("analysis"), Ready: ready})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("analysis service: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("analysis service: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("analysis service caches not synced in a minute")
	}
	return ln.Addr().String()
}
