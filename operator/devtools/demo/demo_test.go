package demo

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/stackflow-io/stackflow/analysis/verification"
	"github.com/stackflow-io/stackflow/internal/revision"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestDemo runs what `make demo DEMO_ARGS="--yes --exit"` runs, through its
// Go entry point, and checks where it ends: release 2 applied and verified at
// every stage by the real operator, synced by the real Argo CD (v3, the
// default) and promoted by the real Kargo when it is built; release 3 stopped
// at dev by the analysis service's verdict, with test and prod left at
// release 2.
func TestDemo(t *testing.T) {
	substrate.MustLocate(t)
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel), zap.WriteTo(os.Stderr)))
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	sum, err := Run(ctx, Options{Dir: dir, Yes: true, Out: &out})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	t.Logf("demo ran in %s", sum.Elapsed.Round(time.Second))
	if !sum.ArgoCD {
		t.Errorf("the demo fell back to its sync loop: Argo CD did not run\n%s", out.String())
	} else if !strings.HasPrefix(sum.ArgoCDVersion, "v3.") {
		t.Errorf("the demo ran Argo CD %s, want v3 by default", sum.ArgoCDVersion)
	}
	if sum.Stopped.Phase != verification.PhaseFailed {
		t.Errorf("release 3 at dev: phase %q, want Failed", sum.Stopped.Phase)
	}
	rows := map[string]Row{}
	for _, r := range sum.Stages {
		rows[r.Stage] = r
	}
	if _, _, err := locateKargo(); err == nil {
		checkKargoDemo(t, ctx, dir, sum, rows, out.String())
		return
	}
	for _, stage := range []string{"test", "prod"} {
		r := rows[stage]
		if r.Commit != revision.Short(sum.Release) || r.State != "Ready" || r.Health != "Healthy Synced" {
			t.Errorf("%s ended %+v; want Ready at release 2 (%s), Healthy Synced", stage, r, revision.Short(sum.Release))
		}
	}
	dev := rows["dev"]
	if !strings.HasPrefix(dev.State, "Stalled") || !strings.Contains(dev.Commit, "tried "+revision.Short(sum.Broken)) || !strings.HasPrefix(dev.Health, "Degraded") {
		t.Errorf("dev ended %+v; want Stalled, having tried release 3 (%s), Degraded", dev, revision.Short(sum.Broken))
	}
	// The test provider's records: what each stage's Pulumi stack holds.
	for stage, want := range map[string]string{"dev": "(release 2)", "test": "(release 2)", "prod": "(release 2)"} {
		b, err := os.ReadFile(filepath.Join(dir, "records", "web-"+stage))
		if err != nil || !strings.HasSuffix(string(b), want) {
			t.Errorf("record of %s = %q (%v); want it to end %q", stage, b, err, want)
		}
	}
	// The promotions were commits to the manifests repository.
	for _, stage := range []string{"test", "prod"} {
		show, err := gitOutput(ctx, dir, "--git-dir", filepath.Join(dir, "git", "served", "manifests.git"), "show", "main:environments/"+stage+"/stack.yaml")
		if err != nil || !strings.Contains(show, sum.Release) {
			t.Errorf("manifests main:environments/%s/stack.yaml does not pin release 2 %s (%v):\n%s", stage, sum.Release, err, show)
		}
	}
	for _, want := range []string{"set-commit", "argocd-update", "Kargo is not run", "release 3 stopped at dev: StackStalled", "Summary", "KUBECONFIG=" + sum.Kubeconfig} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// checkKargoDemo checks where the demo ends with the real Kargo: release 2
// promoted by Kargo into every Stage (prod through the merged pull
// request), verified; release 3's dev Promotion Failed with the analysis
// service's reason, and Kargo refusing it for test.
func checkKargoDemo(t *testing.T, ctx context.Context, dir string, sum *Summary, rows map[string]Row, out string) {
	t.Helper()
	if !sum.Kargo {
		t.Fatalf("Kargo is built but the demo did not run it:\n%s", out)
	}
	for _, stage := range []string{"test", "prod"} {
		r := rows[stage]
		if !strings.HasSuffix(r.Freight, revision.Short(sum.Release)) || r.Promotion != "Succeeded" || !strings.HasPrefix(r.Health, "Healthy") {
			t.Errorf("%s ended %+v; want release 2 (%s), its Promotion Succeeded, Healthy", stage, r, revision.Short(sum.Release))
		}
	}
	// preview takes every Freight from the Warehouse: release 3 too, whose
	// program fails on update only, so its preview succeeds.
	if r := rows["preview"]; !strings.HasSuffix(r.Freight, revision.Short(sum.Broken)) || r.Promotion != "Succeeded" || r.Commit != revision.Short(sum.Broken)+" (previewed)" || !strings.HasPrefix(r.Health, "Healthy") {
		t.Errorf("preview ended %+v; want release 3 (%s) previewed, its Promotion Succeeded, Healthy", r, revision.Short(sum.Broken))
	}
	for _, stage := range []string{"test", "prod"} {
		if r := rows[stage]; r.Commit != revision.Short(sum.Release) || r.State != "Ready" {
			t.Errorf("%s ended %+v; want its Stack Ready at release 2", stage, r)
		}
	}
	// At the retry cap, the operator retries the failing update (Reconciling)
	// between Stalled periods: the row shows either, after a failed up of
	// release 3, on release 2's commit.
	dev := rows["dev"]
	if dev.Promotion != "Failed" || !strings.HasPrefix(dev.State, "Stalled") && !strings.HasPrefix(dev.State, "Reconciling") ||
		dev.Commit != revision.Short(sum.Release)+" (tried "+revision.Short(sum.Broken)+")" || !strings.HasPrefix(dev.LastUpdate, "up failed") {
		t.Errorf("dev ended %+v; want its last Promotion Failed, the Stack Stalled (or retrying) at release 2 (%s) after a failed up of release 3 (%s)", dev, revision.Short(sum.Release), revision.Short(sum.Broken))
	}
	if sum.Stopped.Reason != "StackStalled" {
		t.Errorf("release 3 stopped with %+v, want the analysis service's StackStalled", sum.Stopped)
	}
	for stage, want := range map[string]string{"dev": "(release 2)", "test": "(release 2)", "prod": "(release 2)"} {
		b, err := os.ReadFile(filepath.Join(dir, "records", "web-"+stage))
		if err != nil || !strings.HasSuffix(string(b), want) {
			t.Errorf("record of %s = %q (%v); want it to end %q", stage, b, err, want)
		}
	}
	manifests := filepath.Join(dir, "git", "github", "example-org", "kargo-demo-manifests.git")
	for _, stage := range []string{"test", "prod"} {
		show, err := gitOutput(ctx, dir, "--git-dir", manifests, "show", "main:"+stage+"/stack.yaml")
		if err != nil || !strings.Contains(show, sum.Release) {
			t.Errorf("manifests main:%s/stack.yaml does not pin release 2 %s (%v):\n%s", stage, sum.Release, err, show)
		}
	}
	for _, want := range []string{"Kargo v1.11.2 runs", "the Warehouse found", "opened pull request #1", "release 3 stopped at dev", "not available to this Stage", "Summary", "KUBECONFIG=" + sum.Kubeconfig} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Kargo is not run") || strings.Contains(out, "did not run") {
		t.Errorf("the output says Kargo did not run:\n%s", out)
	}
}
