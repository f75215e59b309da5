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

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

// BenchmarkControllerAtScale is a curve of branch-tracking Stacks at scale:
// 1,000, 2,000, 5,000 and 10,000 Stacks (STACKFLOW_BENCH_STACKS, e.g.
// "1000,2000", picks others), 100 per local repository, each size run by
// one operator and then by two shards. The operators run in this process
// with the pod runtime against envtest's kube-apiserver and etcd:
// Workspaces, StatefulSets, Services and agent token Secrets are created,
// but no kubelet or StatefulSet controller runs them, so every Workspace
// waits for its pod and every Stack for its Workspace.
//
// Two shards are two operators started as the operator binary starts one
// per shard (--watch-label-selector sharding.stackflow.io/key=<shard>), here
// without leader election (one replica each). The Stacks of a repository
// all go to one shard, half the repositories to each, so each repository
// is still listed by one resolver.
//
// Each sub-benchmark (e.g. -bench 'ControllerAtScale/stacks=2000/shards=2')
// reports, from the first Stack's creation until every Workspace is at its
// repository's branch head (the run):
//   - git-listings: the most remote branch listings made in any one git
//     poll interval (one per repository is right);
//   - s-to-head and s-to-create: seconds until every Workspace is at its
//     branch head, and until every Stack was created;
//   - peak-rss-MiB: VmHWM of this process, reset before the operators
//     start and read at the end of the steady interval. The process holds
//     the test's own client and, with shards, both operators;
//   - api-req/stack: requests the operator(s) sent to the API server (a
//     counting RoundTripper on the operators' rest.Config, not the test's
//     client), per Stack;
//   - queue-depth-peak: the Stack controller's workqueue depth (the
//     workqueue_depth gauge, summed over shards), sampled every 200 ms;
//   - p99-reconcile-ms: the Stack controller's reconcile time
//     (controller_runtime_reconcile_time_seconds), p99 interpolated within
//     its buckets;
//   - reconciles/s: Stack reconciles per second;
//
// and, over one git poll interval once every Workspace has its StatefulSet
// (the Workspace controller lags behind the Stacks') and the Stack queue is
// empty (steady state):
//   - api-req/stack/interval and git-listings/interval.
//
// The git poll interval is the default, 1 minute (STACKFLOW_BENCH_GIT_POLL
// changes it), so the steady interval is one minute. The log lines say
// which requests were made, per operator, in the run and in the steady
// interval. Nothing is asserted on time: a run fails only when its
// listings are clearly wrong (more than twice the repositories in one
// interval) or when no more Workspaces reach their head, or no more
// StatefulSets appear, for 5 minutes. Run one process per sub-benchmark
// for clean peaks (a process's caches and heap from a larger run stay),
// with -benchtime 1x:
//
//	go test -run '^$' -bench 'ControllerAtScale/stacks=1000/shards=1$' -benchtime 1x -timeout 60m ./operator/test/e2e/
func BenchmarkControllerAtScale(b *testing.B) {
	sizes := []int{1000, 2000, 5000, 10000}
	if v := os.Getenv("STACKFLOW_BENCH_STACKS"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("STACKFLOW_BENCH_STACKS=%q: want sizes such as 1000,2000", v)
			}
			sizes = append(sizes, n)
		}
	}
	poll := time.Minute
	if v := os.Getenv("STACKFLOW_BENCH_GIT_POLL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("STACKFLOW_BENCH_GIT_POLL: %v", err)
		}
		poll = d
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("stacks=%d", n), func(b *testing.B) {
			for _, shards := range []int{1, 2} {
				b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
					benchmarkAtScale(b, scaleRun{stacks: n, shards: shards, poll: poll})
				})
			}
		})
	}
}

// stacksPerRepo is how many Stacks track each repository's branch.
const stacksPerRepo = 100

type scaleRun struct {
	stacks, shards int
	poll           time.Duration
}

func benchmarkAtScale(b *testing.B, run scaleRun) {
	repos := (run.stacks + stacksPerRepo - 1) / stacksPerRepo
	ns := cp.Namespace(b)
	// After the operators stop (cleanups run last-registered first): what
	// the Workspaces made, which envtest's missing garbage collector would
	// leave for the next run's caches.
	b.Cleanup(func() { deleteWorkspaceObjects(ns) })
	var heads, urls []string
	for range repos {
		r := gitrepo.New(b)
		heads = append(heads, r.Commit(b, "program", map[string]string{"Pulumi.yaml": stackProgram}))
		urls = append(urls, r.URL())
	}
	shardOf := func(repo int) string {
		if run.shards == 1 {
			return ""
		}
		return fmt.Sprintf("bench-%d", repo%run.shards)
	}

	resetPeakRSS()
	var ops []*countedOperator
	for i := range run.shards {
		opts := operator.Options{Runtime: operator.RuntimePod, Pod: pod.Options{AgentImage: "stackflow/operator:bench", DefaultPulumiImage: "pulumi/pulumi:bench"},
			StackWorkers: 8, WorkspaceWorkers: 8, UpdateWorkers: 2, ArtifactDir: b.TempDir(), GitPollInterval: run.poll}
		if run.shards > 1 {
			opts.WatchLabelSelector = labels.SelectorFromSet(labels.Set{pulumiv1.ShardLabel: shardOf(i)})
		}
		ops = append(ops, startCountedOperator(b, opts))
	}
	depth0 := stackQueueDepth(b)
	before := stackReconcileMetrics(b)
	start := time.Now()
	createStacks(b, ns, run.stacks, func(i int) (url, shard string) { return urls[i%repos], shardOf(i % repos) })
	created := time.Since(start)

	// Sampled while waiting: the Stack queue's depth, and the listings
	// made so far (for the most made in any one poll interval).
	peakDepth := 0.0
	listings := []listingSample{{at: start}}
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
				if d := stackQueueDepth(b) - depth0; d > peakDepth {
					peakDepth = d
				}
				// Timed when read: on a loaded machine the tick's own
				// time can be seconds earlier.
				_, q := totals(ops)
				listings = append(listings, listingSample{at: time.Now(), n: q})
			}
		}
	}()
	waitCount(b, "Workspaces at their branch head", run.stacks, func() int {
		return workspacesAt(b, ns, func(i int) string { return heads[i%repos] })
	})
	elapsed := time.Since(start)
	close(stopSampling)
	<-sampled
	after := stackReconcileMetrics(b)
	runRequests, runListings := totals(ops)
	runBreakdown := breakdowns(ops)
	perInterval := mostInWindow(listings, run.poll)

	// The steady interval starts once every Workspace has its StatefulSet
	// (the Workspace controller is behind the Stacks') and the Stack
	// queue has drained.
	waitCount(b, "StatefulSets", run.stacks, func() int { return countStatefulSets(b, ns) })
	toStatefulSets := time.Since(start)
	for drain := time.Now(); stackQueueDepth(b)-depth0 > 0; time.Sleep(200 * time.Millisecond) {
		if time.Since(drain) > 5*time.Minute {
			b.Logf("the Stack queue still holds %.0f requests 5 minutes after every Workspace reached its head; measuring the steady interval anyway", stackQueueDepth(b)-depth0)
			break
		}
	}
	steadyBefore := stackReconcileMetrics(b)
	reqBefore, listBefore := totals(ops)
	breakdownBefore := breakdowns(ops)
	time.Sleep(run.poll)
	reqAfter, listAfter := totals(ops)
	steadyAfter := stackReconcileMetrics(b)
	rss := peakRSS(b, os.Getpid())

	n := float64(run.stacks)
	b.ReportMetric(float64(perInterval), "git-listings")
	b.ReportMetric(elapsed.Seconds(), "s-to-head")
	b.ReportMetric(created.Seconds(), "s-to-create")
	b.ReportMetric(float64(rss)/1024, "peak-rss-MiB")
	b.ReportMetric(float64(runRequests)/n, "api-req/stack")
	b.ReportMetric(float64(reqAfter-reqBefore)/n, "api-req/stack/interval")
	b.ReportMetric(float64(listAfter-listBefore), "git-listings/interval")
	b.ReportMetric(peakDepth, "queue-depth-peak")
	b.ReportMetric(after.sub(before).quantile(0.99)*1000, "p99-reconcile-ms")
	b.ReportMetric(after.sub(before).count/elapsed.Seconds(), "reconciles/s")
	for i, op := range ops {
		b.Logf("operator %d of %d: %d git listings; API requests in the run: %s; in the steady interval: %s",
			i+1, len(ops), op.Git.Queries(), runBreakdown[i], op.requests.snapshot().sub(breakdownBefore[i]))
	}
	b.Logf("run %s: %d git listings, at most %d in one poll interval, for %d repositories; every StatefulSet created %s after the first Stack",
		elapsed.Round(time.Second), runListings, perInterval, repos, toStatefulSets.Round(time.Second))
	b.Logf("steady interval (%s): %.0f Stack reconciles; load average %s", run.poll, steadyAfter.sub(steadyBefore).count, loadAverage())
	if perInterval > int64(2*repos) {
		b.Errorf("%d remote git listings for %d repositories in one poll interval: Stacks of a repository are not sharing its listing", perInterval, repos)
	}
}

// createStacks creates n branch-tracking Stacks, 16 at a time; of returns
// the repository and shard (none: "") of Stack i.
func createStacks(b *testing.B, ns string, n int, of func(i int) (url, shard string)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			url, shard := of(i)
			name := fmt.Sprintf("s%05d", i)
			s := newStack(ns, name, pulumiv1.StackSpec{Stack: name, GitSource: gitSpec(url, "main", ""),
				Config: cfg("recordName", name, "content", "x")})
			if shard != "" {
				s.Labels = map[string]string{pulumiv1.ShardLabel: shard}
			}
			if err := cp.Client.Create(context.Background(), s); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
}

// waitCount waits until count() is n, every 2 s. It gives up only when
// count() has not changed for 5 minutes.
func waitCount(b *testing.B, what string, n int, count func() int) {
	last, progressed := -1, time.Now()
	for {
		got := count()
		if got == n {
			return
		}
		if got != last {
			last, progressed = got, time.Now()
		}
		if time.Since(progressed) > 5*time.Minute {
			b.Fatalf("%d of %d %s, none more for 5 minutes", got, n, what)
		}
		time.Sleep(2 * time.Second)
	}
}

// workspacesAt counts the Workspaces of Stacks s%05d whose spec is at
// head(i), listing them 500 at a time.
func workspacesAt(b *testing.B, ns string, head func(i int) string) int {
	at := 0
	var list autov1alpha1.WorkspaceList
	opts := []client.ListOption{client.InNamespace(ns), client.Limit(500)}
	for {
		if err := cp.Client.List(context.Background(), &list, opts...); err != nil {
			b.Fatal(err)
		}
		for _, ws := range list.Items {
			var i int
			if _, err := fmt.Sscanf(ws.Name, "s%05d", &i); err == nil && ws.Spec.Git != nil && ws.Spec.Git.Ref == head(i) {
				at++
			}
		}
		if list.Continue == "" {
			return at
		}
		opts = []client.ListOption{client.InNamespace(ns), client.Limit(500), client.Continue(list.Continue)}
	}
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
