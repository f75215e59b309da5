package preview

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/stackflow-io/stackflow/github-action/result"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// BenchmarkParallelPreviews previews 8 stacks with parallel 4 and reports
// the wall time (wall-s) next to the sum of the 8 previews run one at a time
// (sum-s) and the ratio wall ÷ (sum ÷ 4) (ratio; 1 is perfect 4-way
// scaling, the goal is ≤ 1.3 on 4 free cores), and ratio-cores, the same
// with the 4 replaced by the cores available when fewer.
func BenchmarkParallelPreviews(b *testing.B) {
	pe := substrate.NewPulumi(b)
	dir := writeProgram(b, program)
	ctx := context.Background()
	var reqs []Request
	for i := range 8 {
		name := fmt.Sprintf("s%d", i)
		// Stacks that exist (empty): the preview creates nothing in the
		// backend and shows the program's resources as create.
		if _, err := auto.UpsertStackLocalSource(ctx, name, dir, auto.Pulumi(pe.Command(b)), auto.EnvVars(pe.EnvVars())); err != nil {
			b.Fatal(err)
		}
		reqs = append(reqs, Request{WorkDir: dir, Stack: name, Config: map[string]ConfigValue{
			"recordName": {Value: "rec-" + name}, "content": {Value: "c"}}})
	}
	o := Options{PulumiCommand: pe.Command(b), Env: pe.EnvVars()}
	check := func(rs []result.Result) {
		for _, r := range rs {
			if r.Status != result.Succeeded || r.Changes.Create != 2 {
				b.Fatalf("%s: %s %+v %s", r.Key, r.Status, r.Changes, r.Error)
			}
		}
	}
	var wall, sum time.Duration
	for b.Loop() {
		for _, r := range reqs {
			start := time.Now()
			check(o.Run(ctx, []Request{r}, 1))
			sum += time.Since(start)
		}
		start := time.Now()
		check(o.Run(ctx, reqs, 4))
		wall += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(wall.Seconds()/n, "wall-s")
	b.ReportMetric(sum.Seconds()/n, "sum-s")
	b.ReportMetric(wall.Seconds()/(sum.Seconds()/4), "ratio")
	// The best ratio CPU-bound previews can reach with fewer than 4 cores
	// is 4 ÷ cores; ratio-cores divides that out.
	cores := min(4, runtime.NumCPU())
	b.ReportMetric(wall.Seconds()/(sum.Seconds()/float64(cores)), "ratio-cores")
}
