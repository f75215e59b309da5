package e2e

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/stackflow-io/stackflow/operator/internal/operator"
)

// countedOperator is an operator whose requests to the API server are
// counted.
type countedOperator struct {
	*operator.Operator
	requests *requestCounts
}

// startCountedOperator starts the operator as operatortest.StartOperator
// does, on a copy of the control plane's config whose transport counts the
// operator's requests (the test's client, cp.Client, is not counted).
//
// A stop that overruns the manager's 30 s grace period is logged, not
// failed: controller-runtime v0.23.3's priority queue can deadlock on
// shutdown when a worker is waiting for an item as the queue shuts down
// (kubernetes-sigs/controller-runtime#3538, fixed upstream by #3540); seen
// here at 5,000 Stacks and at 1,000 with two shards. It is not what the
// benchmark measures.
func startCountedOperator(b *testing.B, opts operator.Options) *countedOperator {
	b.Helper()
	counts := &requestCounts{byKind: map[string]int64{}}
	cfg := rest.CopyConfig(cp.Config)
	cfg.WrapTransport = transport.Wrappers(cfg.WrapTransport, func(rt http.RoundTripper) http.RoundTripper {
		return &countingTransport{next: rt, counts: counts}
	})
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: operator.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: operator.CacheOptionsFor(opts), Controller: ctrlConfigUniqueNames(),
		EventBroadcaster: operator.EventBroadcaster(), //nolint:staticcheck // as the operator binary's
	})
	if err != nil {
		b.Fatal(err)
	}
	op, err := operator.Setup(mgr, opts)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	b.Cleanup(func() {
		cancel()
		switch err := <-done; {
		case err != nil && strings.Contains(err.Error(), "grace period"):
			b.Logf("operator: %v (controller-runtime#3538)", err)
		case err != nil:
			b.Errorf("operator: %v", err)
		}
		op.Close()
	})
	return &countedOperator{Operator: op, requests: counts}
}

// totals sums the operators' API requests and git listings.
func totals(ops []*countedOperator) (requests, listings int64) {
	for _, op := range ops {
		requests += op.requests.snapshot().total()
		listings += op.Git.Queries()
	}
	return requests, listings
}

func breakdowns(ops []*countedOperator) []requestSnapshot {
	var s []requestSnapshot
	for _, op := range ops {
		s = append(s, op.requests.snapshot())
	}
	return s
}

// countingTransport counts each request by verb and resource.
type countingTransport struct {
	next   http.RoundTripper
	counts *requestCounts
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.counts.add(requestKind(r))
	return t.next.RoundTrip(r)
}

type requestCounts struct {
	mu     sync.Mutex
	byKind map[string]int64
}

func (c *requestCounts) add(kind string) {
	c.mu.Lock()
	c.byKind[kind]++
	c.mu.Unlock()
}

func (c *requestCounts) snapshot() requestSnapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := requestSnapshot{}
	for k, v := range c.byKind {
		s[k] = v
	}
	return s
}

// requestSnapshot is a count of requests by kind ("PATCH stacks/status").
type requestSnapshot map[string]int64

func (s requestSnapshot) total() int64 {
	var n int64
	for _, v := range s {
		n += v
	}
	return n
}

func (s requestSnapshot) sub(before requestSnapshot) requestSnapshot {
	d := requestSnapshot{}
	for k, v := range s {
		if v -= before[k]; v != 0 {
			d[k] = v
		}
	}
	return d
}

// String lists the kinds, most frequent first.
func (s requestSnapshot) String() string {
	kinds := make([]string, 0, len(s))
	for k := range s {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b string) int {
		if s[a] != s[b] {
			return int(s[b] - s[a])
		}
		return strings.Compare(a, b)
	})
	parts := []string{fmt.Sprintf("%d in all", s.total())}
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, s[k]))
	}
	return strings.Join(parts, ", ")
}

// requestKind names a request by verb and resource: "LIST workspaces",
// "WATCH stacks", "PATCH stacks/status", "GET secrets".
func requestKind(r *http.Request) string {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	}
	if len(rest) == 0 {
		return r.Method + " discovery"
	}
	if rest[0] == "namespaces" && len(rest) >= 3 {
		rest = rest[2:]
	}
	verb, resource := r.Method, rest[0]
	switch {
	case len(rest) == 1 && r.Method == http.MethodGet && r.URL.Query().Get("watch") == "true":
		verb = "WATCH"
	case len(rest) == 1 && r.Method == http.MethodGet:
		verb = "LIST"
	case len(rest) >= 3:
		resource += "/" + rest[2]
	}
	return verb + " " + resource
}

// stackQueueDepth is the Stack controller's workqueue depth, summed over
// the operators in this process (they share the gauge: a controller's
// queue is named after it). A stopped operator's queue may leave a
// residue: callers subtract the depth they started from.
func stackQueueDepth(b *testing.B) float64 {
	var d float64
	for _, m := range gatherFamily(b, "workqueue_depth") {
		if labelValue(m, "name") == "stack" {
			d += m.GetGauge().GetValue()
		}
	}
	return d
}

// reconcileHistogram is the Stack controller's reconcile time histogram:
// cumulative counts at each upper bound, summed over the operators.
type reconcileHistogram struct {
	count  float64
	bounds []float64
	cum    []float64
}

func stackReconcileMetrics(b *testing.B) reconcileHistogram {
	var h reconcileHistogram
	for _, m := range gatherFamily(b, "controller_runtime_reconcile_time_seconds") {
		if labelValue(m, "controller") != "stack" {
			continue
		}
		hist := m.GetHistogram()
		h.count += float64(hist.GetSampleCount())
		for i, bk := range hist.GetBucket() {
			if i == len(h.bounds) {
				h.bounds = append(h.bounds, bk.GetUpperBound())
				h.cum = append(h.cum, 0)
			}
			h.cum[i] += float64(bk.GetCumulativeCount())
		}
	}
	return h
}

// sub is the histogram of the reconciles since before.
func (h reconcileHistogram) sub(before reconcileHistogram) reconcileHistogram {
	d := reconcileHistogram{count: h.count - before.count, bounds: h.bounds, cum: slices.Clone(h.cum)}
	for i := range d.cum {
		if i < len(before.cum) {
			d.cum[i] -= before.cum[i]
		}
	}
	return d
}

// quantile interpolates linearly within the bucket holding the q-quantile,
// as Prometheus's histogram_quantile does; beyond the last bound it is the
// last bound.
func (h reconcileHistogram) quantile(q float64) float64 {
	if h.count == 0 || len(h.bounds) == 0 {
		return math.NaN()
	}
	rank := q * h.count
	lower, below := 0.0, 0.0
	for i, upper := range h.bounds {
		if h.cum[i] >= rank {
			in := h.cum[i] - below
			if in == 0 {
				return upper
			}
			return lower + (upper-lower)*(rank-below)/in
		}
		lower, below = upper, h.cum[i]
	}
	return h.bounds[len(h.bounds)-1]
}

func gatherFamily(b *testing.B, name string) []*dto.Metric {
	mfs, err := ctrlmetrics.Registry.(prometheus.Gatherer).Gather()
	if err != nil {
		b.Error(err) // called from the sampling goroutine too: no Fatal
		return nil
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.Metric
		}
	}
	return nil
}

// resetPeakRSS returns freed memory to the system and resets this
// process's VmHWM to its current RSS, so that a sub-benchmark's peak is its
// own.
func resetPeakRSS() {
	runtime.GC()
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// loadAverage is the system's 1-, 5- and 15-minute load.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// deleteWorkspaceObjects deletes the StatefulSets, Services and Secrets the
// Workspaces of namespace made.
func deleteWorkspaceObjects(namespace string) {
	ctx := context.Background()
	_ = cp.Client.DeleteAllOf(ctx, &appsv1.StatefulSet{}, client.InNamespace(namespace))
	_ = cp.Client.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(namespace))
	var services corev1.ServiceList
	if err := cp.Client.List(ctx, &services, client.InNamespace(namespace)); err == nil {
		for i := range services.Items {
			_ = cp.Client.Delete(ctx, &services.Items[i])
		}
	}
}

// listingSample is how many listings the operators had made at a time.
type listingSample struct {
	at time.Time
	n  int64
}

// mostInWindow is the most listings made within any window of d. A
// repository is listed again only once its last listing is d old, so this
// is at most the number of repositories.
func mostInWindow(samples []listingSample, d time.Duration) int64 {
	var most int64
	j := 0
	for i := range samples {
		for j+1 < len(samples) && samples[j+1].at.Sub(samples[i].at) <= d {
			j++
		}
		if j < i {
			j = i
		}
		most = max(most, samples[j].n-samples[i].n)
	}
	return most
}

// countStatefulSets counts the StatefulSets in namespace.
func countStatefulSets(b *testing.B, namespace string) int {
	var list metav1.PartialObjectMetadataList
	list.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("StatefulSetList"))
	if err := cp.Client.List(context.Background(), &list, client.InNamespace(namespace)); err != nil {
		b.Fatal(err)
	}
	return len(list.Items)
}
