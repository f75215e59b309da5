package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

// BenchmarkControllerAtScale: 1,000 branch-tracking Stacks on 10 local
// repositories, pod runtime (Workspaces, StatefulSets and Services are created;
// no kubelet runs them). Reports the remote git listings per resolution
// interval, reconciles per second, the time until every Stack's Workspace
// exists at its branch head, and the peak RSS of the process running the
// operator (this test process).
//
//	go test -run '^$' -bench ControllerAtScale -benchtime 1x -timeout 30m ./operator/test/e2e/
func BenchmarkControllerAtScale(b *testing.B) {
	const stacks, repos = 1000, 10
	ctx := context.Background()
	ns := cp.Namespace(b)
	var heads []string
	var urls []string
	for i := range repos {
		r := gitrepo.New(b)
		heads = append(heads, r.Commit(b, "program", map[string]string{"Pulumi.yaml": stackProgram}))
		urls = append(urls, r.URL())
		_ = i
	}
	op, _ := startOperatorWith(b, operator.Options{Runtime: operator.RuntimePod, Pod: pod.Options{AgentImage: "stackflow/operator:bench"},
		StackWorkers: 8, WorkspaceWorkers: 8, UpdateWorkers: 2, ArtifactDir: b.TempDir(), GitPollInterval: time.Minute})
	before := reconcileTotal(b)
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range stacks {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s := newStack(ns, fmt.Sprintf("s%04d", i), pulumiv1.StackSpec{Stack: fmt.Sprintf("s%04d", i), GitSource: gitSpec(urls[i%repos], "main", ""),
				Config: cfg("recordName", fmt.Sprintf("r%04d", i), "content", "x")})
			if err := cp.Client.Create(ctx, s); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	created := time.Since(start)
	deadline := time.Now().Add(20 * time.Minute)
	for {
		var list autov1alpha1.WorkspaceList
		if err := cp.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
		resolved := 0
		for _, ws := range list.Items {
			var idx int
			if _, err := fmt.Sscanf(ws.Name, "s%04d", &idx); err == nil && ws.Spec.Git != nil && ws.Spec.Git.Ref == heads[idx%repos] {
				resolved++
			}
		}
		if resolved == stacks {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d Stacks have their Workspace at the branch head", resolved, stacks)
		}
		time.Sleep(time.Second)
	}
	elapsed := time.Since(start)
	reconciles := reconcileTotal(b) - before
	b.ReportMetric(float64(op.Git.Queries()), "git-listings")
	b.ReportMetric(elapsed.Seconds(), "s-until-all-resolved")
	b.ReportMetric(created.Seconds(), "s-to-create")
	b.ReportMetric(reconciles/elapsed.Seconds(), "reconciles/s")
	b.ReportMetric(float64(peakRSS(b, os.Getpid()))/1024, "peak-rss-MiB")
}

// BenchmarkStacksEndToEnd: 100 Stacks with the local runtime and a trivial
// YAML program, from creation until all are Ready; reports the time and the
// agents' total RSS.
//
//	go test -run '^$' -bench StacksEndToEnd -benchtime 1x -timeout 30m ./operator/test/e2e/
func BenchmarkStacksEndToEnd(b *testing.B) {
	const n = 100
	e := newEnv(b)
	e.opts.StackWorkers, e.opts.WorkspaceWorkers, e.opts.UpdateWorkers = 8, 8, 4
	startOperator(b, e.opts)
	repo := gitrepo.New(b)
	sha := repo.Commit(b, "program", map[string]string{"Pulumi.yaml": stackProgram})
	ctx := context.Background()
	start := time.Now()
	for i := range n {
		s := newStack(e.ns, fmt.Sprintf("e%03d", i), pulumiv1.StackSpec{Stack: fmt.Sprintf("e%03d", i), GitSource: gitSpec(repo.URL(), "main", ""),
			Config: cfg("recordName", fmt.Sprintf("e%03d", i), "content", "x")})
		if err := cp.Client.Create(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
	var agentsRSS int64
	deadline := time.Now().Add(25 * time.Minute)
	for {
		var list pulumiv1.StackList
		if err := cp.Client.List(ctx, &list, client.InNamespace(e.ns)); err != nil {
			b.Fatal(err)
		}
		ready := 0
		for i := range list.Items {
			if readyAt(sha)(&list.Items[i]) {
				ready++
			}
		}
		if rss := agentsTotalRSS(e); rss > agentsRSS {
			agentsRSS = rss
		}
		if ready == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d Stacks Ready", ready, n)
		}
		time.Sleep(time.Second)
	}
	b.ReportMetric(time.Since(start).Seconds(), "s-until-all-ready")
	b.ReportMetric(float64(agentsRSS)/1024, "agents-peak-total-rss-MiB")
}

func reconcileTotal(b *testing.B) float64 {
	mfs, err := ctrlmetrics.Registry.(prometheus.Gatherer).Gather()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, mf := range mfs {
		if mf.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range mf.Metric {
			if labelValue(m, "controller") == "stack" {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// peakRSS reads VmHWM (KiB) of a process.
func peakRSS(b *testing.B, pid int) int64 { return procStatus(pid, "VmHWM:") }

func procStatus(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return kb
		}
	}
	return 0
}

// agentsTotalRSS sums the current RSS (KiB) of the local agents.
func agentsTotalRSS(e *env) int64 {
	files, _ := filepath.Glob(filepath.Join(e.opts.LocalRoot, "*", "*", "agent.json"))
	var total int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var st struct{ PID int }
		if err := jsonUnmarshal(b, &st); err == nil {
			total += procStatus(st.PID, "VmRSS:")
		}
	}
	return total
}
