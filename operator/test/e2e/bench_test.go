package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

// BenchmarkUpdateOverhead compares, for the same YAML program on the same
// machine, a raw `pulumi up` (Automation API, local workspace) with an Update
// run through the operator and a local workspace agent, for a no-change up and
// a one-resource change. It reports both wall times per operation and their
// ratio.
//
//	go test -run '^$' -bench UpdateOverhead -benchtime 5x ./operator/test/e2e/
func BenchmarkUpdateOverhead(b *testing.B) {
	for _, change := range []bool{false, true} {
		name := "no-change"
		if change {
			name = "one-resource-change"
		}
		b.Run(name, func(b *testing.B) { benchOverhead(b, change) })
	}
}

func benchOverhead(b *testing.B, change bool) {
	e := newEnv(b)
	startOperator(b, e.opts)
	repo := gitrepo.New(b)
	repo.Commit(b, "program", map[string]string{"Pulumi.yaml": recordProgram, ".gitignore": "Pulumi.*.yaml\n"})
	ctx := context.Background()

	// Raw: the same program in a checkout, its own stack.
	raw, err := auto.UpsertStackLocalSource(ctx, "raw", repo.Work, auto.Pulumi(e.pe.Command(b)), auto.EnvVars(e.pe.EnvVars()))
	if err != nil {
		b.Fatal(err)
	}
	setRaw := func(content string) {
		if err := raw.SetAllConfig(ctx, auto.ConfigMap{"content": {Value: content}, "recordName": {Value: "raw"}}); err != nil {
			b.Fatal(err)
		}
	}
	setRaw("v0")
	if _, err := raw.Up(ctx, optup.SuppressProgress()); err != nil {
		b.Fatal(err)
	}

	ws := newWorkspace(e.ns, "bench", repo.URL(), stackConfig("content", "v0", "recordName", "op"))
	if err := cp.Client.Create(ctx, ws); err != nil {
		b.Fatal(err)
	}
	waitWorkspaceReady(b, ws, 2*time.Minute)
	runUpdateB(b, e, "warmup")

	var rawTotal, opTotal time.Duration
	b.ResetTimer()
	for i := range b.N {
		content := "v0"
		if change {
			content = fmt.Sprintf("v%d", i+1)
		}
		b.StopTimer()
		setRaw(content)
		if change {
			mutate(b, ws, func() { ws.Spec.Stacks[0].Config = stackConfig("content", content, "recordName", "op") })
			waitWorkspaceReady(b, ws, 2*time.Minute)
		}
		b.StartTimer()

		start := time.Now()
		res, err := raw.Up(ctx, optup.SuppressProgress())
		if err != nil {
			b.Fatal(err)
		}
		rawTotal += time.Since(start)
		if change && (*res.Summary.ResourceChanges)["update"] != 1 {
			b.Fatalf("raw up changes = %v", *res.Summary.ResourceChanges)
		}

		start = time.Now()
		u := runUpdateB(b, e, fmt.Sprintf("up-%d", i))
		opTotal += time.Since(start)
		if change && u.Status.Changes["update"] != 1 {
			b.Fatalf("operator up changes = %v", u.Status.Changes)
		}
	}
	b.StopTimer()
	rawS := rawTotal.Seconds() / float64(b.N)
	opS := opTotal.Seconds() / float64(b.N)
	b.ReportMetric(rawS, "raw-s/op")
	b.ReportMetric(opS, "operator-s/op")
	b.ReportMetric(opS/rawS, "ratio")
}

// runUpdateB creates an up and polls tightly for its completion, so the
// measured time is the operator's, not the poll interval's.
func runUpdateB(b *testing.B, e *env, name string) *autov1alpha1.Update {
	b.Helper()
	u := newUpdate(e.ns, name, "bench", autov1alpha1.UpType)
	if err := cp.Client.Create(context.Background(), u); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if err := get(b, u); err == nil && apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeComplete) {
			if !succeeded(u) {
				b.Fatalf("%s: %q", name, u.Status.Message)
			}
			return u
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatalf("%s did not complete", name)
	return nil
}
