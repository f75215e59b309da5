package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/stackflow-io/stackflow/analysis/verification"
	"github.com/stackflow-io/stackflow/internal/revision"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/test/framework/argocd"
	"github.com/stackflow-io/stackflow/test/framework/hostproxy"
	"github.com/stackflow-io/stackflow/test/framework/kargo"
	"github.com/stackflow-io/stackflow/test/framework/rollouts"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// kargoRun is the real Kargo and what it needs beside Argo CD: Argo Rollouts'
// analysis controller (its verifications), the host proxy, and
// examples/kargo set up on them.
type kargoRun struct {
	proxy *hostproxy.Proxy
	rc    *rollouts.Controller
	procs *kargo.Instance
	pipe  *kargo.Pipeline
}

// stop stops Kargo, Argo Rollouts, the GitHub server and the proxy.
func (k *kargoRun) stop() {
	if k.procs != nil {
		k.procs.Stop()
	}
	if k.rc != nil {
		k.rc.Stop()
	}
	if k.pipe != nil {
		k.pipe.Close()
	}
	if k.proxy != nil {
		_ = k.proxy.Close()
	}
}

// locateKargo finds the Kargo and Argo Rollouts builds, or says why the demo
// cannot run Kargo.
func locateKargo() (kargo.Build, rollouts.Build, error) {
	kb, err := kargo.Locate()
	if err != nil {
		return kargo.Build{}, rollouts.Build{}, err
	}
	rb, err := rollouts.Locate()
	if err != nil {
		return kargo.Build{}, rollouts.Build{}, fmt.Errorf("Kargo verifies with Argo Rollouts: %w", err)
	}
	return kb, rb, nil
}

// startKargo installs Kargo's and Argo Rollouts' CRDs and starts the proxy,
// Argo Rollouts' analysis controller and Kargo (controller, webhooks server,
// management controller).
func (d *demo) startKargo(ctx context.Context, kb kargo.Build, rb rollouts.Build) (err error) {
	k := &kargoRun{}
	defer func() {
		if err != nil {
			k.stop()
		}
	}()
	env := d.local.CP.Env
	// The operator's admission policy recording who approves a plan: prod's
	// Stack requires approval.
	if err := substrate.InstallPlanApprovalPolicy(ctx, d.local.CP.Config, d.c, "default"); err != nil {
		return fmt.Errorf("install the plan approval policy: %w", err)
	}
	if err := kb.InstallCRDs(env); err != nil {
		return fmt.Errorf("install Kargo's CRDs: %w", err)
	}
	if err := rb.InstallCRDs(env); err != nil {
		return fmt.Errorf("install Argo Rollouts' CRDs: %w", err)
	}
	if k.proxy, err = hostproxy.Start(); err != nil {
		return err
	}
	if k.rc, err = rollouts.Start(ctx, rollouts.Options{Build: rb, Env: env, Dir: filepath.Join(d.local.Dir, "rollouts"), HTTPProxy: k.proxy.URL}); err != nil {
		return fmt.Errorf("start Argo Rollouts: %w", err)
	}
	if k.procs, err = kargo.Start(ctx, kargo.Options{Build: kb, Env: env, Client: d.c, Dir: filepath.Join(d.local.Dir, "kargo"),
		ArgoCD: true, Rollouts: true, AllowCredentialsOverHTTP: true, HTTPProxy: k.proxy.URL}); err != nil {
		return fmt.Errorf("start Kargo: %w", err)
	}
	d.kargo = k
	d.scr.Say("Kargo %s runs (controller, webhooks server, management controller; logs in %s), with Argo Rollouts' analysis controller for its verifications", kargo.Version, filepath.Join(d.local.Dir, "kargo"))
	return nil
}

// runKargo rolls the releases out with Kargo: examples/kargo (Warehouse,
// Stages dev, preview, test, prod, Stackflow's ClusterPromotionTasks and
// ClusterAnalysisTemplates) on this machine. Release 1 is auto-promoted into
// dev and preview; release 2 too, then promoted into test and into prod
// through a pull request the demo merges as its reviewer, where the plan
// prod's Stack awaits approval for is shown and the person asked to approve
// it (through Argo CD's approve action); the broken release 3 fails its dev
// Promotion.
func (d *demo) runKargo(ctx context.Context, sum *Summary) error {
	say := d.scr.Say
	sum.Kargo = true
	if err := d.serveAnalysis(ctx); err != nil {
		return err
	}
	d.scr.Say("analysis service on %s (TokenReview + SubjectAccessReview), reached as %s", d.analysis, kargo.AnalysisHost)
	root := filepath.Join(d.local.Dir, "git")
	var err error
	if d.git, err = startGitServer(filepath.Join(root, "served")); err != nil {
		return err
	}
	defer d.git.Stop()
	if d.program, err = newRepo(ctx, d.git, "program.git", filepath.Join(root, "work", "program")); err != nil {
		return err
	}
	first, err := d.program.commit(ctx, "Release 1", map[string]string{programFile: programYAML(1, false)})
	if err != nil {
		return err
	}
	say("program repository %s (release 1: %s); working clone %s", d.git.URL("program.git"), revision.Short(first), d.program.work)
	token := make([]byte, 20)
	if _, err := rand.Read(token); err != nil {
		return err
	}
	k := d.kargo
	if k.pipe, err = kargo.StartPipeline(ctx, kargo.PipelineOptions{Client: d.c, Config: d.local.CP.Config, RepoRoot: substrate.RepoRoot(),
		Dir: filepath.Join(root, "github"), Proxy: k.proxy, ProgramURL: d.git.URL("program.git"), AnalysisAddr: strings.TrimPrefix(d.analysis, "http://"),
		GitHubToken: "ghp_" + hex.EncodeToString(token), RetryCap: 5, Say: say}); err != nil {
		return err
	}
	d.stages = nil
	for _, name := range kargo.ExampleStages {
		d.stages = append(d.stages, stage{Name: name, StackNamespace: kargo.ExampleStackNamespace, StackName: "web-" + name, App: "kargo-demo-" + name})
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go d.watch(watchCtx)

	if err := k.pipe.StartWarehouse(ctx); err != nil {
		return err
	}
	say("applied the Warehouse infra: it subscribes to programs/web of the program repository")
	if _, err := d.autoPromoted(ctx, first, "release 1"); err != nil {
		return err
	}

	release, err := d.program.commit(ctx, "Release 2: a new greeting", map[string]string{programFile: programYAML(2, false)})
	if err != nil {
		return err
	}
	sum.Release = release
	say("release 2 committed to the program repository: %s", revision.Short(release))
	f2, err := d.autoPromoted(ctx, release, "release 2")
	if err != nil {
		return err
	}
	if err := d.kargoPromote(ctx, "test", f2); err != nil {
		return err
	}
	// prod: through a pull request the demo merges as its reviewer; web-prod
	// requires approval, so the Promotion then shows the plan and waits, and
	// the demo asks the person to approve that plan (or rejects it).
	if err := d.kargoPromote(ctx, "prod", f2); errors.Is(err, errPlanRejected) {
		say("prod not promoted: its plan was rejected (the Promotion failed; web-prod stays as it was)")
		sum.ProdDeclined = true
	} else if err != nil {
		return err
	}

	broken, err := d.program.commit(ctx, "Release 3: breaks on update", map[string]string{programFile: programYAML(3, true)})
	if err != nil {
		return err
	}
	sum.Broken = broken
	say("release 3 committed: %s; its program fails on update", revision.Short(broken))
	f3, err := d.waitFreight(ctx, broken)
	if err != nil {
		return err
	}
	promo, err := d.waitPromotion(ctx, "dev", f3, 5*time.Minute)
	if err != nil {
		return err
	}
	if promo.Status.Phase != "Failed" {
		return fmt.Errorf("the dev Promotion of release 3 ended %s, but its program fails on update", promo.Status.Phase)
	}
	sum.Stopped = verification.Result{Phase: verification.PhaseFailed, Reason: reasonOf(promo.Status.Message), Message: promo.Status.Message}
	say("release 3 stopped at dev: the Promotion %s Failed: %s", promo.Name, promo.Status.Message)
	if _, err := k.pipe.Promote(ctx, "test", f3.Name); err != nil {
		say("Kargo refuses to promote it into test: %v", err)
	} else {
		return fmt.Errorf("Kargo accepted a Promotion of the broken release 3 into test")
	}

	stopWatch()
	sum.Stages = d.rows(ctx)
	d.scr.Update(sum.Stages)
	sum.Elapsed = time.Since(d.start)
	if err := d.summary(sum); err != nil {
		return err
	}
	if d.o.Stay {
		say("everything keeps running: export KUBECONFIG=%s; kubectl get stages,freight,promotions -n kargo-demo; kubectl get stacks -A. Ctrl-C stops it", d.local.Kubeconfig)
		select {
		case <-ctx.Done():
		case err := <-d.local.Done():
			return err
		}
	}
	return nil
}

// reasonOf finds the analysis service's reason in a failed Promotion's
// message (the http step's errorExpression puts "<reason>: <message>").
func reasonOf(message string) string {
	for _, r := range []string{"StackStalled", "UpdateFailed"} {
		if strings.Contains(message, r) {
			return r
		}
	}
	return "PromotionFailed"
}

// autoPromoted waits until the Warehouse has made Freight of the commit and
// Kargo has auto-promoted it into dev and preview, and verified it there.
func (d *demo) autoPromoted(ctx context.Context, commit, what string) (*kargo.Freight, error) {
	f, err := d.waitFreight(ctx, commit)
	if err != nil {
		return nil, err
	}
	for _, st := range []string{"dev", "preview"} {
		promo, err := d.waitPromotion(ctx, st, f, 5*time.Minute)
		if err != nil {
			return nil, err
		}
		if promo.Status.Phase != "Succeeded" {
			return nil, fmt.Errorf("the %s Promotion of %s ended %s: %s", st, what, promo.Status.Phase, promo.Status.Message)
		}
		d.scr.Say("%s: Kargo auto-promoted %s (Promotion %s Succeeded: stackflow-promote pinned the Stack, Argo CD synced it, the operator ran it)", st, what, promo.Name)
	}
	if err := d.waitVerified(ctx, f, "dev", "preview"); err != nil {
		return nil, err
	}
	d.scr.Say("Kargo verified %s in dev (applied) and preview (previewed against prod) with AnalysisRuns of Stackflow's templates: test may take it", what)
	return f, nil
}

// kargoPromote promotes the Freight into a Stage as a user does, and, for
// prod, merges the pull request stackflow-promote-pr opens, as its reviewer.
func (d *demo) kargoPromote(ctx context.Context, stageName string, f *kargo.Freight) error {
	k := d.kargo
	name, err := k.pipe.Promote(ctx, stageName, f.Name)
	if err != nil {
		return fmt.Errorf("promote into %s: %w", stageName, err)
	}
	d.scr.Say("%s: Promotion %s created (as `kargo promote --stage %s --freight %s` would)", stageName, name, stageName, f.Name)
	if stageName == "prod" {
		pr, err := d.waitPullRequest(ctx)
		if err != nil {
			return err
		}
		d.scr.Say("prod: the Promotion opened pull request #%d %q and waits for it; merging it as the reviewer", pr.Number, pr.Title)
		merge, err := k.pipe.GitHub.Merge(ctx, kargo.ManifestsOwner, kargo.ManifestsRepo, pr.Number)
		if err != nil {
			return err
		}
		// As GitHub's pull_request webhook to Kargo's receiver does.
		if err := k.pipe.Refresh(ctx, kargo.PromotionKind, name); err != nil {
			return err
		}
		d.scr.Say("prod: pull request #%d merged as %s", pr.Number, revision.Short(merge))
		approved, err := d.decidePlan(ctx, d.stages[len(d.stages)-1], name, f)
		if err != nil {
			return err
		}
		if !approved {
			if _, err := d.waitPromotion(ctx, stageName, f, 5*time.Minute); err != nil {
				return err
			}
			return errPlanRejected
		}
	}
	promo, err := d.waitPromotion(ctx, stageName, f, 5*time.Minute)
	if err != nil {
		return err
	}
	if promo.Status.Phase != "Succeeded" {
		return fmt.Errorf("the %s Promotion ended %s: %s", stageName, promo.Status.Phase, promo.Status.Message)
	}
	if err := d.waitVerified(ctx, f, stageName); err != nil {
		return err
	}
	d.scr.Say("%s: Promotion %s Succeeded and the Freight is verified", stageName, promo.Name)
	return nil
}

// errPlanRejected: the person rejected prod's plan.
var errPlanRejected = errors.New("prod's plan was rejected")

// decidePlan waits until the prod Promotion shows the plan its Stack awaits
// approval for (the outputs of its step plan), asks the person whether to
// approve it (--yes approves), and approves or rejects it through Argo CD's
// approve or reject action on the Stack, naming the fingerprint shown, as a
// person does from Argo CD's UI. It reports whether the plan was approved.
func (d *demo) decidePlan(ctx context.Context, st stage, promoName string, f *kargo.Freight) (bool, error) {
	var shown map[string]any
	var ended *kargo.Promotion
	err := poll(ctx, 5*time.Minute, "the prod Promotion to show web-prod's plan", func() (bool, error) {
		promo, err := d.kargo.pipe.PromotionOf(ctx, st.Name, f.Name)
		if err != nil || promo == nil {
			return false, err
		}
		if promo.Terminal() {
			ended = promo
			return true, nil
		}
		shown, _ = promo.Status.State["promote::plan"].(map[string]any)
		return shown != nil && shown["awaitingApproval"] == true, nil
	})
	if err != nil {
		return false, err
	}
	if ended != nil {
		return false, fmt.Errorf("the prod Promotion ended %s before web-prod's plan was shown: %s", ended.Status.Phase, ended.Status.Message)
	}
	fp, _ := shown["fingerprint"].(string)
	summary, _ := shown["summary"].(string)
	if len(fp) != 64 {
		return false, fmt.Errorf("the prod Promotion shows no plan fingerprint: %v", shown)
	}
	d.scr.Say("prod: %s/%s awaits approval of plan %s (%s) of %s: Argo CD shows it Suspended with an approve action; Kargo's Promotion %s waits at its step approval",
		st.StackNamespace, st.StackName, fp[:12], summary, revision.Short(f.Commits[0].ID), promoName)
	approved := d.o.Yes
	if !approved {
		if approved, err = d.ask(ctx, fmt.Sprintf("Approve plan %s (%s) for prod? Argo CD's approve action applies exactly it; no rejects it. [y/N] ", fp[:12], summary)); err != nil {
			return false, err
		}
	}
	action := map[bool]string{true: "approve", false: "reject"}[approved]
	if err := d.argo.RunActionV2(ctx, st.App, pulumiv1.GroupVersion.WithKind("Stack"), st.StackNamespace, st.StackName, action, map[string]string{"fingerprint": fp}); err != nil {
		return false, fmt.Errorf("%s web-prod's plan through Argo CD: %w", action, err)
	}
	d.scr.Say("prod: ran Argo CD's %s action on %s: a PlanApproval of plan %s, created as Argo CD's own identity (%s); Argo CD's event on %s names who ran it",
		action, st.StackName, fp[:12], argocd.ServerServiceAccount, st.App)
	return approved, nil
}

func (d *demo) waitPullRequest(ctx context.Context) (pr struct {
	Number int
	Title  string
}, err error) {
	err = poll(ctx, 3*time.Minute, "the prod Promotion to open a pull request", func() (bool, error) {
		for _, p := range d.kargo.pipe.GitHub.Pulls(kargo.ManifestsOwner, kargo.ManifestsRepo) {
			if p.Open {
				pr.Number, pr.Title = p.Number, p.Title
				return true, nil
			}
		}
		return false, nil
	})
	return pr, err
}

func (d *demo) waitFreight(ctx context.Context, commit string) (*kargo.Freight, error) {
	// A push webhook would do this (Kargo's receivers refresh the Warehouses
	// subscribed to the repository); the Warehouse's own interval is 5 min.
	if err := d.kargo.pipe.Refresh(ctx, kargo.WarehouseKind, kargo.ExampleWarehouse); err != nil {
		return nil, err
	}
	var f *kargo.Freight
	err := poll(ctx, time.Minute, "Freight of "+revision.Short(commit), func() (bool, error) {
		var err error
		f, err = d.kargo.pipe.FreightOf(ctx, commit)
		return f != nil, err
	})
	if err == nil {
		d.scr.Say("the Warehouse found %s: Freight %s (%s)", revision.Short(commit), f.Alias, f.Name[:7])
	}
	return f, err
}

// waitPromotion waits until the newest Promotion of the Freight into the
// Stage has ended.
func (d *demo) waitPromotion(ctx context.Context, stageName string, f *kargo.Freight, timeout time.Duration) (*kargo.Promotion, error) {
	var promo *kargo.Promotion
	err := poll(ctx, timeout, fmt.Sprintf("the %s Promotion of %s", stageName, f.Alias), func() (bool, error) {
		var err error
		promo, err = d.kargo.pipe.PromotionOf(ctx, stageName, f.Name)
		return promo != nil && promo.Terminal(), err
	})
	return promo, err
}

func (d *demo) waitVerified(ctx context.Context, f *kargo.Freight, stages ...string) error {
	return poll(ctx, 5*time.Minute, fmt.Sprintf("Freight %s verified in %s", f.Alias, strings.Join(stages, ", ")), func() (bool, error) {
		got, err := d.kargo.pipe.Freight(ctx, f.Name)
		if err != nil {
			return false, err
		}
		for _, st := range stages {
			if !got.VerifiedIn(st) {
				return false, nil
			}
		}
		return true, nil
	})
}

// poll calls cond every 300 ms until it is true, ctx ends or the timeout
// passes.
func poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("no error")
			}
			return fmt.Errorf("timed out after %s waiting for %s (last: %v)", timeout, what, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// kargoColumns fills each row's Freight (the Stage's, by alias and commit)
// and Promotion (its last Promotion's phase).
func (k *kargoRun) kargoColumns(ctx context.Context, rows []Row) {
	if k.pipe == nil {
		return
	}
	for i := range rows {
		st, err := k.pipe.Stage(ctx, rows[i].Stage)
		if err != nil {
			continue
		}
		if name := st.CurrentFreight(); name != "" {
			if f, err := k.pipe.Freight(ctx, name); err == nil && len(f.Commits) > 0 {
				rows[i].Freight = f.Alias + " " + revision.Short(f.Commits[0].ID)
			}
		}
		switch lp := st.Status.LastPromotion; {
		case st.Status.CurrentPromotion != nil:
			rows[i].Promotion = "Running"
		case lp != nil:
			rows[i].Promotion = lp.Status.Phase
		}
	}
}
