package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stackflow-io/stackflow/analysis/verification"
	"github.com/stackflow-io/stackflow/internal/revision"
	"github.com/stackflow-io/stackflow/test/framework/argocd"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestDemo runs `make demo DEMO_ARGS="--yes --exit"` as a user would, from
// the repository root in a clean environment: none of the variables the
// suite exports (STACKFLOW_*, KUBEBUILDER_ASSETS), so the Makefile and the
// demo must find the substrate themselves. It checks where the demo ends,
// from its JSON summary and the files it leaves: release 2 applied and
// verified at every stage by the real operator, synced by the real Argo CD
// (v3, the default) and promoted by the real Kargo when it is built; release
// 3 stopped at dev by the analysis service's verdict, with test and prod left
// at release 2.
func TestDemo(t *testing.T) {
	substrate.MustLocate(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	sum, out := runMakeDemo(t, ctx, dir)
	t.Logf("demo ran in %s", sum.Elapsed.Round(time.Second))
	if !sum.ArgoCD {
		t.Errorf("the demo fell back to its sync loop: Argo CD did not run\n%s", out)
	} else if !strings.HasPrefix(sum.ArgoCDVersion, "v3.") {
		t.Errorf("the demo ran Argo CD %s, want v3 by default", sum.ArgoCDVersion)
	}
	if build, err := argocd.Locate(argocd.V3); err == nil && build.UI && (sum.ArgoCDUI == "" || !strings.Contains(out, "Argo CD UI: open "+sum.ArgoCDUI)) {
		t.Errorf("Argo CD's build embeds its UI, but the demo did not print its URL (summary: %q)\n%s", sum.ArgoCDUI, out)
	}
	if sum.Stopped.Phase != verification.PhaseFailed {
		t.Errorf("release 3 at dev: phase %q, want Failed", sum.Stopped.Phase)
	}
	rows := map[string]Row{}
	for _, r := range sum.Stages {
		rows[r.Stage] = r
	}
	if _, _, err := locateKargo(); err == nil {
		checkKargoDemo(t, ctx, dir, sum, rows, out)
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
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
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
	// prod requires approval: the demo shows the plan and (--yes) approves
	// it through Argo CD's approve action.
	for _, want := range []string{"Kargo v1.11.2 runs", "the Warehouse found", "opened pull request #1", "kargo-demo-stacks/web-prod awaits approval of plan ",
		"ran Argo CD's approve action on web-prod", "release 3 stopped at dev", "not available to this Stage", "Summary", "KUBECONFIG=" + sum.Kubeconfig} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Kargo is not run") || strings.Contains(out, "did not run") {
		t.Errorf("the output says Kargo did not run:\n%s", out)
	}
}

// runMakeDemo runs `make demo` in the repository root with the demo's state
// in dir and returns its summary and output. The environment is the test's
// minus what the suite exports: a user's shell has none of it. STACKFLOW_CACHE
// is kept when set, as it is the user's own choice of where the substrate
// lives (the suite never sets it), and so are Go's own variables.
func runMakeDemo(t *testing.T, ctx context.Context, dir string) (*Summary, string) {
	t.Helper()
	root := repoRoot(t)
	summary := filepath.Join(t.TempDir(), "summary.json")
	args := fmt.Sprintf("--yes --exit --plain --dir %s --summary-json %s", dir, summary)
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "demo", "DEMO_ARGS="+args)
	cmd.Dir = root
	cmd.Env = cleanEnv(os.Environ())
	// make and the demo it execs share a process group, so a timeout stops
	// the demo's control plane, Argo CD and Kargo with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("make demo: %v\n%s", err, out.String())
	}
	b, err := os.ReadFile(summary)
	if err != nil {
		t.Fatalf("make demo wrote no summary: %v\n%s", err, out.String())
	}
	var sum Summary
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatalf("the demo's summary: %v\n%s", err, b)
	}
	return &sum, out.String()
}

// cleanEnv is env without the variables the test suite exports (make test
// evaluates hack/substrate.sh env) and without make's own, which would make
// the inner make a sub-make of the suite's.
func cleanEnv(env []string) []string {
	var kept []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "STACKFLOW_CACHE":
		case strings.HasPrefix(name, "STACKFLOW_"), name == "KUBEBUILDER_ASSETS", name == "KUBECONFIG",
			name == "MAKEFLAGS", name == "MFLAGS", name == "MAKELEVEL", name == "MAKEOVERRIDES":
			continue
		}
		kept = append(kept, kv)
	}
	return kept
}

// repoRoot is the directory of go.mod, where the Makefile is.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

func TestCleanEnvDropsWhatTheSuiteExports(t *testing.T) {
	got := cleanEnv([]string{"PATH=/bin", "HOME=/h", "STACKFLOW_ARGOCD3=/c/a", "STACKFLOW_CACHE=/c", "KUBEBUILDER_ASSETS=/k", "MAKEFLAGS=-j2", "GOFLAGS=-mod=mod", "STACKFLOW_KARGO=/c/k"})
	want := []string{"PATH=/bin", "HOME=/h", "STACKFLOW_CACHE=/c", "GOFLAGS=-mod=mod"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("cleanEnv = %q, want %q", got, want)
	}
}
