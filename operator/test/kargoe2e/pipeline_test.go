package kargoe2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/stackflow-io/stackflow/analysis/service"
	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/local"
	"github.com/stackflow-io/stackflow/operator/test/argocd"
	"github.com/stackflow-io/stackflow/operator/test/fakegithub"
	"github.com/stackflow-io/stackflow/operator/test/gitrepo"
	"github.com/stackflow-io/stackflow/operator/test/inprocess"
	"github.com/stackflow-io/stackflow/operator/test/kargo"
	"github.com/stackflow-io/stackflow/operator/test/substrate"
)

const (
	// githubHost is the GitHub Enterprise Server holding the manifests
	// repository: Kargo picks its GitHub provider for a host containing
	// "github", and reaches it through the host proxy.
	githubHost = "github.stackflow.test"
	// analysisHost is the analysis service's in-cluster address, which the
	// shipped task and templates default to; the host proxy serves it.
	analysisHost = "stackflow-analysis.stackflow-system.svc:8080"
	// githubToken is the one token the GitHub server accepts (git and API):
	// the password of Kargo's git credentials and of Argo CD's repository.
	githubToken = "ghp_stackflowKargoE2E0123456789abcdef0123"
	// owner and repo name the manifests repository, as in the example.
	owner, manifestsRepo = "example-org", "kargo-demo-manifests"
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

// pipeline is the running example: examples/kargo, its repositories and the
// Stackflow side (operator, analysis service).
type pipeline struct {
	t       *testing.T
	ns      string // the Kargo project namespace
	pe      *substrate.Pulumi
	program *gitrepo.Repo
	gh      *fakegithub.Enterprise
	start   time.Time
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
//
// Each commit is applied once per stage, per the Pulumi backend's history.
func TestKargoPromotesStacks(t *testing.T) {
	if skipReason != "" {
		t.Skip(skipReason)
	}
	ctx := context.Background()
	p := &pipeline{t: t, ns: kargo.ExampleProject, pe: substrate.NewPulumi(t), start: time.Now()}
	r1 := p.setUp(ctx)

	// Release 1: Freight, then dev and preview by auto-promotion.
	f1 := p.waitFreight(ctx, r1, 30*time.Second)
	t.Logf("release 1 %.7s is Freight %s (%s)", r1, f1.Name, f1.Alias)
	for _, st := range []string{"dev", "preview"} {
		promo := p.waitPromotion(ctx, st, f1.Name, "Succeeded", 4*time.Minute)
		p.checkSteps(promo, "git-clone", "yaml-update", "git-commit", "git-push", "argocd-update", "http", "compose-output")
	}
	p.waitVerified(ctx, f1.Name, 3*time.Minute, "dev", "preview")
	p.stackRan(ctx, "web-dev", r1, autov1alpha1.UpType)
	p.stackRan(ctx, "web-preview", r1, autov1alpha1.PreviewType)
	p.verifiedByRollouts(ctx, "dev", "stackflow-stack-applied")
	p.verifiedByRollouts(ctx, "preview", "stackflow-stack-previewed")
	t.Logf("release 1 applied and verified in dev and previewed in preview after %s", time.Since(p.start).Round(100*time.Millisecond))

	// test: promoted by a person, as `kargo promote` or the UI does.
	testPromo := p.promote(ctx, "test", f1.Name)
	p.waitPromotion(ctx, "test", f1.Name, "Succeeded", 3*time.Minute)
	p.waitVerified(ctx, f1.Name, 2*time.Minute, "test")
	p.stackRan(ctx, "web-test", r1, autov1alpha1.UpType)
	t.Logf("test: Promotion %s Succeeded and verified after %s", testPromo, time.Since(p.start).Round(100*time.Millisecond))

	// prod: through a pull request that a reviewer merges.
	p.prodThroughPullRequest(ctx, f1.Name, r1)

	// Release 2 is broken: its dev promotion fails with the service's reason.
	r2 := p.program.Commit(t, "Release 2: breaks on update", map[string]string{"programs/web/Pulumi.yaml": program(2, true)})
	// A push webhook would do this (Kargo's receivers refresh the Warehouses
	// subscribed to the repository); the Warehouse's own interval is 5 min.
	if err := refresh(ctx, warehouseGVK, p.ns, kargo.ExampleWarehouse); err != nil {
		t.Fatal(err)
	}
	f2 := p.waitFreight(ctx, r2, 30*time.Second)
	failed := p.waitPromotion(ctx, "dev", f2.Name, "Failed", 4*time.Minute)
	if !strings.Contains(failed.Status.Message, "StackStalled") {
		t.Errorf("the dev Promotion of release 2 failed with %q, want the analysis service's reason StackStalled", failed.Status.Message)
	}
	t.Logf("release 2 %.7s: dev Promotion %s Failed: %s", r2, failed.Name, failed.Status.Message)
	p.notVerified(ctx, f2.Name, "dev")
	p.notAvailableToTest(ctx, f2.Name)

	// Each commit applied once per stage: release 1 in dev, test and prod;
	// release 2 nowhere.
	for _, stack := range []string{"dev", "test", "prod"} {
		appliedOnce(t, p.pe.Backend, programProject, stack, r1)
		for _, u := range backendHistory(t, p.pe.Backend, programProject, stack) {
			if u.Kind == "update" && u.Result == "succeeded" && u.Head == r2 {
				t.Errorf("the broken release 2 was applied to stack %s", stack)
			}
		}
	}
	t.Logf("whole pipeline in %s", time.Since(p.start).Round(100*time.Millisecond))
}

// setUp makes the repositories, starts the operator and the analysis
// service, applies the shipped tasks and templates and the example, and
// returns release 1's commit. The Warehouse is applied last, once
// everything a promotion needs is in place.
func (p *pipeline) setUp(ctx context.Context) string {
	t := p.t
	// The program repository, on loopback, public (the Warehouse reads it
	// without credentials).
	var srv *gitrepo.HTTPServer
	p.program, srv = gitrepo.NewServedHTTP(t, "infra.git", nil)
	programURL := p.program.HTTPURL(srv)
	r1 := p.program.Commit(t, "Release 1", map[string]string{"programs/web/Pulumi.yaml": program(1, false)})

	// The manifests repository, on the GitHub Enterprise server.
	var err error
	if p.gh, err = fakegithub.StartEnterprise(t.TempDir(), githubHost, githubToken); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.gh.Close() })
	proxy.Route(githubHost, p.gh.Addr)
	ex, err := kargo.LoadExample(kargo.ExampleOptions{RepoRoot: substrate.RepoRoot(), ProgramURL: programURL,
		ManifestsURL: p.gh.URL(owner, manifestsRepo), RetryCap: 2})
	if err != nil {
		t.Fatal(err)
	}
	p.seedManifests(ctx, ex.Manifests)

	// Stackflow: the Stacks' namespace (with the Pulumi token Secret the
	// Stacks name; the file backend does not read it), the operator, the
	// analysis service behind its in-cluster name.
	mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kargo.ExampleStackNamespace}})
	mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: kargo.ExampleStackNamespace, Name: "pulumi-api"},
		StringData: map[string]string{"accessToken": "pul-unused-by-the-file-backend"}})
	root := t.TempDir()
	t.Cleanup(func() { local.StopAll(root) })
	inprocess.StartOperator(t, cp.Config, operator.Options{
		Runtime: operator.RuntimeLocal, LocalRoot: root, AgentBinary: agentBin,
		PulumiRoot: p.pe.Paths.PulumiRoot, AgentEnv: p.pe.EnvVars(), WorkspaceWorkers: 4, UpdateWorkers: 4, StackWorkers: 4,
		ArtifactDir: t.TempDir(), StackResyncOverride: time.Second, WatchNamespaces: []string{kargo.ExampleStackNamespace},
	})
	proxy.Route(analysisHost, startAnalysis(t))

	// Cluster-wide, unmodified: the verifier ClusterRole, the
	// ClusterAnalysisTemplates, the ClusterPromotionTasks.
	p.applyFile("analysis/config/default/verifier_roles.yaml")
	p.applyFile("analysis/config/templates/clusteranalysistemplates.yaml")
	for _, u := range kustomize(t, "kargo-steps/config/tasks") {
		p.apply(ctx, u)
	}

	// Argo CD: the manifests repository (its credentials, through the host
	// proxy), the example's AppProject and Applications.
	p.apply(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": manifestsRepo, "namespace": argocd.Namespace,
			"labels": map[string]any{"argocd.argoproj.io/secret-type": "repository"}},
		"stringData": map[string]any{"type": "git", "url": p.gh.URL(owner, manifestsRepo),
			"username": "argocd", "password": githubToken, "proxy": proxy.URL},
	}})
	for _, u := range ex.Argo {
		p.apply(ctx, u)
	}

	// The Kargo project: Kargo's management controller creates its namespace.
	p.apply(ctx, ex.Project)
	substrate.Eventually(t, time.Minute, "Kargo to create the project namespace "+p.ns, func() (bool, error) {
		ns := &corev1.Namespace{}
		if err := c.Get(ctx, types.NamespacedName{Name: p.ns}, ns); err != nil {
			return false, err
		}
		return ns.Labels["kargo.akuity.io/project"] == "true", nil
	})
	creds := ex.GitCredentials
	if err := unstructured.SetNestedStringMap(creds.Object, map[string]string{
		"repoURL": p.gh.URL(owner, manifestsRepo), "username": "kargo", "password": githubToken}, "stringData"); err != nil {
		t.Fatal(err)
	}
	p.apply(ctx, creds)
	var warehouse *unstructured.Unstructured
	for _, u := range ex.Objects {
		if u.GetKind() == "Warehouse" {
			warehouse = u
			continue
		}
		p.apply(ctx, u)
	}
	p.fillVerifierToken(ctx)
	p.start = time.Now()
	p.apply(ctx, warehouse)
	return r1
}

// seedManifests pushes the example's manifests/ as the first commit of the
// manifests repository's main.
func (p *pipeline) seedManifests(ctx context.Context, files map[string][]byte) {
	t := p.t
	bare, err := p.gh.InitRepo(ctx, owner, manifestsRepo)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	for name, b := range files {
		path := filepath.Join(work, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "The Stacks of examples/kargo/manifests"},
		{"push", "-q", bare, "main"},
	} {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=stackflow-test", "GIT_AUTHOR_EMAIL=test@stackflow.invalid",
			"GIT_COMMITTER_NAME=stackflow-test", "GIT_COMMITTER_EMAIL=test@stackflow.invalid", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// fillVerifierToken puts a token of the ServiceAccount stackflow-verifier into
// its Secret stackflow-verifier-token, as Kubernetes' token controller does
// for a service-account-token Secret (the control plane here runs none).
func (p *pipeline) fillVerifierToken(ctx context.Context) {
	t := p.t
	cs := kubernetes.NewForConfigOrDie(cp.Config)
	tr, err := cs.CoreV1().ServiceAccounts(p.ns).CreateToken(ctx, "stackflow-verifier", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: p.ns, Name: "stackflow-verifier-token"}, sec); err != nil {
		t.Fatal(err)
	}
	sec.Data = map[string][]byte{"token": []byte(tr.Status.Token)}
	if err := c.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
}

// waitFreight waits until the Warehouse has made Freight of commit sha.
func (p *pipeline) waitFreight(ctx context.Context, sha string, timeout time.Duration) *freight {
	p.t.Helper()
	var f *freight
	substrate.Eventually(p.t, timeout, fmt.Sprintf("Freight of commit %.7s", sha), func() (bool, error) {
		var err error
		f, err = freightOf(ctx, p.ns, sha)
		return f != nil, err
	})
	return f
}

// waitPromotion waits until the newest Promotion of the Freight into the
// Stage is in phase want, failing at once when it ends in another.
func (p *pipeline) waitPromotion(ctx context.Context, stageName, freightName, want string, timeout time.Duration) *promotion {
	p.t.Helper()
	var promo *promotion
	substrate.Eventually(p.t, timeout, fmt.Sprintf("a Promotion of %s into %s to be %s", freightName, stageName, want), func() (bool, error) {
		var err error
		if promo, err = promotionFor(ctx, p.ns, stageName, freightName); err != nil || promo == nil {
			return false, err
		}
		if promo.Status.Phase == want {
			return true, nil
		}
		if promo.terminal() {
			p.t.Fatalf("Promotion %s of %s into %s ended %s, want %s: %s", promo.Name, freightName, stageName, promo.Status.Phase, want, promo.Status.Message)
		}
		return false, fmt.Errorf("Promotion %s is %s at step %d: %s", promo.Name, promo.Status.Phase, promo.Status.CurrentStep, promo.Status.Message)
	})
	return promo
}

// checkSteps checks the Promotion ran the task's steps, inflated by Kargo.
func (p *pipeline) checkSteps(promo *promotion, uses ...string) {
	p.t.Helper()
	var got []string
	for _, s := range promo.Spec.Steps {
		got = append(got, s.Uses)
	}
	if strings.Join(got, ",") != strings.Join(uses, ",") {
		p.t.Errorf("Promotion %s ran steps %v, want %v", promo.Name, got, uses)
	}
	for i, m := range promo.Status.StepMeta {
		if m.Status != "Succeeded" && !(uses[i] == "argocd-update" && m.Status == "Skipped") {
			p.t.Errorf("Promotion %s step %d (%s) ended %s: %s", promo.Name, i, uses[i], m.Status, m.Message)
		}
	}
}

// waitVerified waits until the Freight is verified in each Stage.
func (p *pipeline) waitVerified(ctx context.Context, freightName string, timeout time.Duration, stages ...string) {
	p.t.Helper()
	substrate.Eventually(p.t, timeout, fmt.Sprintf("Freight %s verified in %v", freightName, stages), func() (bool, error) {
		u, err := get(ctx, freightGVK, p.ns, freightName)
		if err != nil {
			return false, err
		}
		f := &freight{}
		if err := decode(u, f); err != nil {
			return false, err
		}
		for _, st := range stages {
			if _, ok := f.Status.VerifiedIn[st]; !ok {
				return false, fmt.Errorf("verified in %d Stages, not %s", len(f.Status.VerifiedIn), st)
			}
		}
		return true, nil
	})
}

// stackRan checks that the Stack's last update of that type succeeded at the
// commit.
func (p *pipeline) stackRan(ctx context.Context, name, commit string, typ autov1alpha1.UpdateType) {
	p.t.Helper()
	s := &pulumiv1.Stack{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: kargo.ExampleStackNamespace, Name: name}, s); err != nil {
		p.t.Fatal(err)
	}
	lu := s.Status.LastUpdate
	if lu == nil || lu.LastSuccessfulCommit != commit || lu.Type != typ || lu.State != pulumiv1.SucceededStackStateMessage {
		p.t.Errorf("Stack %s: last update %+v, want a succeeded %s of %.7s", name, lu, typ, commit)
	}
	if s.Spec.Commit != commit {
		p.t.Errorf("Stack %s: spec.commit %q, want %s (pinned by the promotion, synced by Argo CD)", name, s.Spec.Commit, commit)
	}
}

// verifiedByRollouts checks that the Stage's last verification was an
// AnalysisRun of the template that Argo Rollouts' controller ran to
// Successful, measuring the analysis service.
func (p *pipeline) verifiedByRollouts(ctx context.Context, stageName, template string) {
	t := p.t
	t.Helper()
	st, err := getStage(ctx, p.ns, stageName)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Status.FreightHistory) == 0 || len(st.Status.FreightHistory[0].VerificationHistory) == 0 {
		t.Fatalf("Stage %s has no verification", stageName)
	}
	v := st.Status.FreightHistory[0].VerificationHistory[0]
	if v.Phase != "Successful" || v.AnalysisRun == nil {
		t.Fatalf("Stage %s: verification %+v, want Successful with an AnalysisRun", stageName, v)
	}
	run, err := get(ctx, runGVK, v.AnalysisRun.Namespace, v.AnalysisRun.Name)
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
	if phase != "Successful" || strings.Join(measured, ",") != "verified,deadline" {
		t.Errorf("AnalysisRun %s (Stage %s): phase %s, successful metrics %v, want Successful with verified and deadline measured", run.GetName(), stageName, phase, measured)
	}
	specTemplates, _, _ := unstructured.NestedSlice(run.Object, "spec", "metrics")
	if len(specTemplates) == 0 {
		t.Errorf("AnalysisRun %s has no metrics", run.GetName())
	}
	t.Logf("Stage %s verified by AnalysisRun %s (%s), run by Argo Rollouts: %s", stageName, run.GetName(), template, phase)
}

// promote creates a Promotion as a user does (`kargo promote`, the UI, or
// kubectl): Kargo's webhook names it and copies the Stage's steps into it.
func (p *pipeline) promote(ctx context.Context, stageName, freightName string) string {
	p.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kargo.akuity.io/v1alpha1", "kind": "Promotion",
		"metadata": map[string]any{"namespace": p.ns, "name": stageName + "-by-user"},
		"spec":     map[string]any{"stage": stageName, "freight": freightName},
	}}
	if err := c.Create(ctx, u); err != nil {
		p.t.Fatalf("create a Promotion of %s into %s: %v", freightName, stageName, err)
	}
	return u.GetName()
}

// prodThroughPullRequest promotes the Freight into prod: the Promotion opens
// a pull request and waits; a reviewer merges it; the merge commit is synced
// and applied.
func (p *pipeline) prodThroughPullRequest(ctx context.Context, freightName, commit string) {
	t := p.t
	name := p.promote(ctx, "prod", freightName)
	var pr fakegithub.PullRequest
	substrate.Eventually(t, 2*time.Minute, "the prod Promotion to open a pull request", func() (bool, error) {
		prs := p.gh.Pulls(owner, manifestsRepo)
		if len(prs) == 0 {
			if promo, err := promotionFor(ctx, p.ns, "prod", freightName); err == nil && promo != nil && promo.terminal() {
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
	// While the pull request is open, the Promotion waits in git-wait-for-pr.
	substrate.Eventually(t, time.Minute, "the prod Promotion to wait for the pull request", func() (bool, error) {
		promo, err := promotionFor(ctx, p.ns, "prod", freightName)
		if err != nil || promo == nil {
			return false, err
		}
		if promo.Status.Phase != "Running" || promo.Status.CurrentStep >= len(promo.Spec.Steps) {
			return false, fmt.Errorf("Promotion %s is %s at step %d", promo.Name, promo.Status.Phase, promo.Status.CurrentStep)
		}
		return promo.Spec.Steps[promo.Status.CurrentStep].Uses == "git-wait-for-pr", nil
	})
	s := &pulumiv1.Stack{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: kargo.ExampleStackNamespace, Name: "web-prod"}, s); !apierrors.IsNotFound(err) {
		t.Fatalf("Stack web-prod exists before the pull request is merged (err %v)", err)
	}
	merge, err := p.gh.Merge(ctx, owner, manifestsRepo, pr.Number)
	if err != nil {
		t.Fatal(err)
	}
	// GitHub's pull_request webhook makes Kargo's receiver refresh the
	// Promotion waiting on it; without it, git-wait-for-pr polls every 30 s.
	if err := refresh(ctx, promotionGVK, p.ns, name); err != nil {
		t.Fatal(err)
	}
	promo := p.waitPromotion(ctx, "prod", freightName, "Succeeded", 3*time.Minute)
	p.checkSteps(promo, "git-clone", "yaml-update", "git-commit", "git-push", "git-open-pr", "git-wait-for-pr", "argocd-update", "http", "compose-output")
	p.waitVerified(ctx, freightName, 2*time.Minute, "prod")
	p.stackRan(ctx, "web-prod", commit, autov1alpha1.UpType)
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
}

// notVerified checks the Freight is not verified in the Stage.
func (p *pipeline) notVerified(ctx context.Context, freightName, stageName string) {
	p.t.Helper()
	u, err := get(ctx, freightGVK, p.ns, freightName)
	if err != nil {
		p.t.Fatal(err)
	}
	f := &freight{}
	if err := decode(u, f); err != nil {
		p.t.Fatal(err)
	}
	if _, ok := f.Status.VerifiedIn[stageName]; ok {
		p.t.Errorf("Freight %s is verified in %s", freightName, stageName)
	}
}

// notAvailableToTest checks that Kargo refuses to promote the Freight into
// test: test takes Freight verified in dev and preview.
func (p *pipeline) notAvailableToTest(ctx context.Context, freightName string) {
	p.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kargo.akuity.io/v1alpha1", "kind": "Promotion",
		"metadata": map[string]any{"namespace": p.ns, "name": "test-broken"},
		"spec":     map[string]any{"stage": "test", "freight": freightName},
	}}
	err := c.Create(ctx, u)
	if err == nil || !strings.Contains(err.Error(), "not available to this Stage") {
		p.t.Errorf("a Promotion of the broken Freight %s into test: %v, want Kargo's refusal: not available to this Stage", freightName, err)
	}
}

// apply applies an object server-side, as kubectl apply --server-side.
func (p *pipeline) apply(ctx context.Context, u *unstructured.Unstructured) {
	p.t.Helper()
	if err := c.Patch(ctx, u, client.Apply, client.FieldOwner("kubectl"), client.ForceOwnership); err != nil {
		p.t.Fatalf("apply %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
}

// applyFile applies the objects of a file of the repository, unmodified.
func (p *pipeline) applyFile(path string) {
	p.t.Helper()
	b, err := os.ReadFile(filepath.Join(substrate.RepoRoot(), path))
	if err != nil {
		p.t.Fatal(err)
	}
	for _, u := range decodeAll(p.t, b) {
		p.apply(context.Background(), u)
	}
}

// kustomize builds a kustomization of the repository, as kubectl apply -k.
func kustomize(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(substrate.RepoRoot(), dir))
	if err != nil {
		t.Fatal(err)
	}
	b, err := rm.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return decodeAll(t, b)
}

func mustCreate(t testing.TB, o client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), o); err != nil {
		t.Fatal(err)
	}
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
