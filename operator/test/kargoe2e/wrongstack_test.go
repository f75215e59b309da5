package kargoe2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/test/framework/kargo"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// Two Stages of the test's own beside the example's, promoting with the
// shipped stackflow-promote task, each with one mistake a user makes:
//   - absentStage names a Stack that never appears in the cluster: its
//     stackFile (absentFile, seeded in the manifests repository) is a Stack
//     manifest no Argo CD Application applies. Its stackNotFoundGrace is
//     absentGrace.
//   - typoStage has a mistyped stackName (web-tset) with the real stackFile
//     of test, the case of the issue: the pin would go to web-test and the
//     wait to web-tset.
const (
	absentStage = "absent"
	absentStack = "web-absent"
	absentFile  = "absent/stack.yaml"
	absentGrace = 30 * time.Second
	typoStage   = "typo"
	typoStack   = "web-tset"
	typoFile    = "test/stack.yaml"
)

// extraManifests are seeded in the manifests repository with the example's:
// the Stack manifest of absentStage, in a directory no Application syncs.
func extraManifests() map[string]string {
	return map[string]string{absentFile: fmt.Sprintf(`# A Stack no Argo CD Application applies (kargoe2e).
apiVersion: pulumi.com/v1
kind: Stack
metadata:
  name: %s
  namespace: %s
spec:
  stack: absent
  projectRepo: https://github.com/example-org/infra.git
  repoDir: programs/web
  commit: "0000000000000000000000000000000000000000"
`, absentStack, kargo.ExampleStackNamespace)}
}

// applyMistakenStages applies absentStage and typoStage: Freight comes
// directly from the example's Warehouse; each promotes with
// stackflow-promote, without argocdApp (an Application authorises one Stage)
// and without verification (their promotions are meant to fail).
func (p *pipeline) applyMistakenStages(ctx context.Context, programURL string) {
	t := p.t
	stage := func(name, stack, file string, refVars ...map[string]any) *unstructured.Unstructured {
		vars := []any{
			map[string]any{"name": "manifestsRepoURL", "value": p.ManifestsURL},
			map[string]any{"name": "stackFile", "value": file},
		}
		for _, v := range refVars {
			vars = append(vars, v)
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kargo.akuity.io/v1alpha1", "kind": "Stage",
			"metadata": map[string]any{"name": name, "namespace": p.Namespace},
			"spec": map[string]any{
				"vars": []any{
					map[string]any{"name": "repoURL", "value": programURL},
					map[string]any{"name": "stackNamespace", "value": kargo.ExampleStackNamespace},
					map[string]any{"name": "stackName", "value": stack},
				},
				"requestedFreight": []any{map[string]any{
					"origin":  map[string]any{"kind": "Warehouse", "name": kargo.ExampleWarehouse},
					"sources": map[string]any{"direct": true},
				}},
				"promotionTemplate": map[string]any{"spec": map[string]any{"steps": []any{map[string]any{
					"task": map[string]any{"name": "stackflow-promote", "kind": "ClusterPromotionTask"},
					"as":   "promote",
					"vars": vars,
				}}}},
			},
		}}
	}
	for _, u := range []*unstructured.Unstructured{
		stage(absentStage, absentStack, absentFile, map[string]any{"name": "stackNotFoundGrace", "value": absentGrace.String()}),
		stage(typoStage, typoStack, typoFile),
	} {
		if err := c.Patch(ctx, u, client.Apply, client.FieldOwner("kubectl"), client.ForceOwnership); err != nil {
			t.Fatalf("apply Stage %s: %v", u.GetName(), err)
		}
	}
}

// stepOf returns the execution record of the task step `as` of a Promotion
// (Kargo names the steps it inflates from a task <task alias>::<step>).
func stepOf(promo *kargo.Promotion, as string) (uses, status, message string, took time.Duration) {
	for i, m := range promo.Status.StepMeta {
		if m.Alias != "promote::"+as {
			continue
		}
		if m.StartedAt != nil && m.FinishedAt != nil {
			took = m.FinishedAt.Sub(*m.StartedAt)
		}
		if i < len(promo.Spec.Steps) {
			uses = promo.Spec.Steps[i].Uses
		}
		return uses, m.Status, m.Message, took
	}
	return "", "", "", 0
}

// absentStackFailsAfterTheGrace checks the Promotion of the Freight into
// absentStage, started earlier: Kargo pinned and pushed the absent Stack's
// manifest, then waited for a Stack the cluster never gets. The analysis
// service answers Pending (StackNotFound) until the grace is over, then
// Failed: the Promotion fails with a message naming the Stack, after the
// grace and well before the wait's 30-minute bound (on the old task it was
// still Running, and would have been for 30 minutes).
func (p *pipeline) absentStackFailsAfterTheGrace(ctx context.Context, freight string) {
	t := p.t
	t.Helper()
	promo := p.waitPromotion(ctx, absentStage, freight, "Failed", absentGrace+3*time.Minute)
	if !strings.Contains(promo.Status.Message, "StackNotFound: Stack "+kargo.ExampleStackNamespace+"/"+absentStack+" does not exist") {
		t.Errorf("Promotion %s failed with %q, want the analysis service's StackNotFound naming %s/%s", promo.Name, promo.Status.Message, kargo.ExampleStackNamespace, absentStack)
	}
	// The first wait, step plan, is the one that meets the missing Stack.
	uses, status, _, waited := stepOf(promo, "plan")
	// The grace counts from the step before the wait, and notFoundAfter
	// carries whole seconds; Kargo polls every 10 s (its floor), and may
	// reconcile a little late on a loaded machine.
	if uses != "http" || status != "Failed" || waited < absentGrace-2*time.Second || waited > absentGrace+time.Minute {
		t.Errorf("the wait (%s) ended %s after %s, want Failed after the grace of %s (within a minute of it)", uses, status, waited, absentGrace)
	}
	if promo.Status.StartedAt != nil && promo.Status.FinishedAt != nil {
		t.Logf("absent Stack: Promotion %s Failed after %s (the wait: %s, grace %s): %s", promo.Name,
			promo.Status.FinishedAt.Sub(*promo.Status.StartedAt).Round(100*time.Millisecond), waited.Round(100*time.Millisecond), absentGrace, promo.Status.Message)
	}
	// It did pin its own file: the check before the commit passed.
	if _, status, _, _ := stepOf(promo, "push"); status != "Succeeded" {
		t.Errorf("Promotion %s: push %s, want Succeeded (the file is the Stage's Stack)", promo.Name, status)
	}
}

// typoIsRefusedBeforeAnyCommit promotes the Freight into typoStage, whose
// stackName (web-tset) is not the Stack of its stackFile (test/stack.yaml
// holds web-test): the Promotion fails at the check, naming both, before
// yaml-update, and the manifests repository gets no commit of it (on the
// old task, the commit pinned web-test to the Freight and the wait watched
// web-tset for 30 minutes).
func (p *pipeline) typoIsRefusedBeforeAnyCommit(ctx context.Context, freight, commit string) {
	t := p.t
	t.Helper()
	bare := p.GitHub.Bare(kargo.ManifestsOwner, kargo.ManifestsRepo)
	git := func(args ...string) string {
		out, err := exec.CommandContext(ctx, "git", append([]string{"--git-dir", bare}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	head, refs := git("rev-parse", "refs/heads/main"), git("for-each-ref", "--format=%(refname)", "refs/heads")
	start := time.Now()
	if _, err := p.Promote(ctx, typoStage, freight); err != nil {
		t.Fatal(err)
	}
	// Until it ended, or reached the wait (the old task did: it had pushed
	// the pin of web-test and waited for web-tset), so that the repository
	// is checked either way.
	var promo *kargo.Promotion
	substrate.Eventually(t, 2*time.Minute, "the Promotion into "+typoStage+" to end", func() (bool, error) {
		var err error
		if promo, err = p.PromotionOf(ctx, typoStage, freight); err != nil || promo == nil {
			return false, err
		}
		return promo.Terminal() || promo.CurrentStepUses() == "http", fmt.Errorf("Promotion %s is %s at step %d (%s)", promo.Name, promo.Status.Phase, promo.Status.CurrentStep, promo.CurrentStepUses())
	})
	if promo.Status.Phase != "Failed" {
		t.Errorf("Promotion %s is %s at step %d (%s), want Failed at the check", promo.Name, promo.Status.Phase, promo.Status.CurrentStep, promo.CurrentStepUses())
	}
	for _, want := range []string{
		"stackFile " + typoFile + " must hold the Stack " + kargo.ExampleStackNamespace + "/" + typoStack,
		`named "web-test" in namespace "` + kargo.ExampleStackNamespace + `"`,
		"nothing was committed",
	} {
		if !strings.Contains(promo.Status.Message, want) {
			t.Errorf("Promotion %s failed with %q, want it to contain %q", promo.Name, promo.Status.Message, want)
		}
	}
	for as, want := range map[string]string{"check-grace": "Skipped", "clone": "Succeeded", "stack-file": "Succeeded", "check-stack-file": "Failed",
		"update-stack": "Skipped", "commit": "Skipped", "push": "Skipped", "verify": "Skipped"} {
		if _, got, msg, _ := stepOf(promo, as); got != want {
			t.Errorf("Promotion %s: step %s %s (%s), want %s", promo.Name, as, got, msg, want)
		}
	}
	// Nothing of it reached the repository: no commit on main since (other
	// Stages may push meanwhile) touches test/stack.yaml or comes from this
	// Stage, and no branch appeared.
	if log := git("log", "--format=%h %s", head+"..refs/heads/main", "--", typoFile); log != "" {
		t.Errorf("commits touching %s after the refused Promotion: %s", typoFile, log)
	}
	if log := git("log", "--format=%h %s", "--grep=^"+typoStage+": ", head+"..refs/heads/main"); log != "" {
		t.Errorf("commits of Stage %s: %s", typoStage, log)
	}
	if now := git("for-each-ref", "--format=%(refname)", "refs/heads"); now != refs {
		t.Errorf("branches %q after the refused Promotion, were %q", now, refs)
	}
	// And web-test still runs what test promoted.
	s := &pulumiv1.Stack{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: kargo.ExampleStackNamespace, Name: "web-test"}, s); err != nil {
		t.Fatal(err)
	}
	if s.Spec.Commit != commit {
		t.Errorf("Stack web-test pins %.7s after the refused Promotion, want %.7s", s.Spec.Commit, commit)
	}
	t.Logf("typo: Promotion %s %s after %s: %s", promo.Name, promo.Status.Phase, time.Since(start).Round(100*time.Millisecond), promo.Status.Message)
}
