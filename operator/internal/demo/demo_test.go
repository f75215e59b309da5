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
	"github.com/stackflow-io/stackflow/operator/test/substrate"
)

// TestDemo runs what `make demo DEMO_ARGS="--yes --exit"` runs, through its
// Go entry point, and checks where it ends: release 2 applied and verified at
// every stage by the real operator, synced by the real Argo CD (v3, the
// default); release 3 stopped at dev by the analysis service's verdict, with
// test and prod left at release 2.
func TestDemo(t *testing.T) {
	substrate.MustLocate(t)
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel), zap.WriteTo(os.Stderr)))
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
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
	for _, stage := range []string{"test", "prod"} {
		r := rows[stage]
		if r.Commit != short(sum.Release) || r.State != "Ready" || r.Health != "Healthy Synced" {
			t.Errorf("%s ended %+v; want Ready at release 2 (%s), Healthy Synced", stage, r, short(sum.Release))
		}
	}
	dev := rows["dev"]
	if !strings.HasPrefix(dev.State, "Stalled") || !strings.Contains(dev.Commit, "tried "+short(sum.Broken)) || !strings.HasPrefix(dev.Health, "Degraded") {
		t.Errorf("dev ended %+v; want Stalled, having tried release 3 (%s), Degraded", dev, short(sum.Broken))
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
	for _, want := range []string{"set-commit", "argocd-update", "Kargo is not run here", "release 3 stopped at dev: StackStalled", "Summary", "KUBECONFIG=" + sum.Kubeconfig} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
