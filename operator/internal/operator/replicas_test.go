package operator_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// gate is an API server proxy that holds Program requests until opened: the
// replica behind it cannot sync its Program cache meanwhile.
type gate struct {
	once sync.Once
	open chan struct{}
	srv  *httptest.Server
}

func newGate(t *testing.T, upstream *rest.Config) *gate {
	t.Helper()
	u, err := url.Parse(upstream.Host)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := rest.TransportFor(upstream)
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{open: make(chan struct{})}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.Transport = tr
	proxy.FlushInterval = -1 // watches stream
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/apis/pulumi.com/") && strings.Contains(r.URL.Path, "/programs") {
			select {
			case <-g.open:
			case <-r.Context().Done():
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(g.srv.Close)
	t.Cleanup(g.release) // let held requests go before the server closes
	return g
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// config is a rest.Config reaching the API server through the gate.
func (g *gate) config() *rest.Config { return &rest.Config{Host: g.srv.URL} }

// replica is one operator (a manager with leader election) in this process.
type replica struct {
	mgr                               ctrl.Manager
	op                                *operator.Operator
	probeAddr, metricsAddr, artifacts string
	// stop stops the manager (cleanly: the Lease is released) and returns
	// when it has.
	stop func()
}

func startReplica(t *testing.T, cfg *rest.Config, ns, identity string) *replica {
	t.Helper()
	skip := true
	r := &replica{artifacts: t.TempDir()}
	opts := ctrl.Options{
		Scheme: operator.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:      operator.CacheOptions([]string{ns}),
		Controller: config.Controller{SkipNameValidation: &skip}, // two managers in one process
	}
	le := operator.LeaderElection{Enabled: true, Namespace: ns, Identity: identity,
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second}
	if _, err := le.Apply(cfg, &opts); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	op, err := operator.Setup(mgr, operator.Options{Runtime: operator.RuntimePod, ArtifactDir: r.artifacts})
	if err != nil {
		t.Fatal(err)
	}
	if r.probeAddr, err = operator.AddProbeServer(mgr, "127.0.0.1:0", op.ReadyChecks); err != nil {
		t.Fatal(err)
	}
	if r.metricsAddr, err = operator.AddMetricsServer(mgr, operator.MetricsOptions{Addr: "127.0.0.1:0", Auth: operator.MetricsAuthNone}); err != nil {
		t.Fatal(err)
	}
	r.mgr, r.op = mgr, op
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", identity, err)
			}
			op.Close()
		})
	}
	t.Cleanup(r.stop)
	return r
}

func httpGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s (last: %s)", timeout, what, last)
}

// TestFollowerReadinessAndArtifacts: a follower is not ready until its Program
// cache has synced (held back here by a proxy), and becomes ready without
// leading; it then serves the artifact the leader published, rendered from
// its cache (its own directory stays empty), at the leader's digest.
func TestFollowerReadinessAndArtifacts(t *testing.T) {
	cp := substrate.StartControlPlaneT(t)
	ns := cp.Namespace(t)
	ctx := context.Background()

	leader := startReplica(t, cp.Config, ns, "leader")
	select {
	case <-leader.mgr.Elected():
	case <-time.After(time.Minute):
		t.Fatal("the first replica was not elected within a minute")
	}
	prog := &pulumiv1.Program{}
	prog.Namespace, prog.Name = ns, "web"
	prog.Program.Outputs = map[string]pulumiv1.Expression{"greeting": {Raw: []byte(`"hello"`)}}
	if err := cp.Client.Create(ctx, prog); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the leader to publish the program", func() (bool, string) {
		err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, prog)
		return err == nil && prog.Status.Artifact != nil, fmt.Sprint(err)
	})
	published, err := os.ReadFile(filepath.Join(leader.artifacts, filepath.FromSlash(prog.Status.Artifact.Path)))
	if err != nil {
		t.Fatal(err)
	}

	g := newGate(t, cp.Config)
	follower := startReplica(t, g.config(), ns, "follower")
	// The probe server answers once the manager runs: not ready, because the
	// Program cache cannot sync.
	var code int
	var body []byte
	eventually(t, time.Minute, "the follower's probe server", func() (bool, string) {
		code, body = httpGet(t, "http://"+follower.probeAddr+"/readyz?verbose")
		return code != 0, string(body)
	})
	if code != http.StatusInternalServerError || !strings.Contains(string(body), "[-]program-cache failed") {
		t.Fatalf("follower readiness before its cache synced: HTTP %d\n%s", code, body)
	}
	// An artifact request meanwhile is answered, with 503: to be retried.
	if code, body := httpGet(t, "http://"+follower.op.ArtifactAddr+"/"+prog.Status.Artifact.Path); code != http.StatusServiceUnavailable {
		t.Fatalf("follower: artifact before its cache synced: HTTP %d %q, want 503", code, body)
	}

	g.release()
	eventually(t, time.Minute, "the follower ready", func() (bool, string) {
		code, body := httpGet(t, "http://"+follower.probeAddr+"/readyz?verbose")
		return code == http.StatusOK, fmt.Sprintf("HTTP %d %s", code, body)
	})
	var lease coordinationv1.Lease
	if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: operator.LeaderElectionID}, &lease); err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != "leader" {
		t.Fatalf("lease holder = %v, want leader (the follower is ready without leading)", h)
	}
	code, body = httpGet(t, "http://"+follower.op.ArtifactAddr+"/"+prog.Status.Artifact.Path)
	if code != http.StatusOK || !bytes.Equal(body, published) {
		t.Fatalf("follower: GET %s: HTTP %d, %d bytes; want the leader's %d bytes", prog.Status.Artifact.Path, code, len(body), len(published))
	}
	if entries, _ := os.ReadDir(follower.artifacts); len(entries) != 0 {
		t.Fatalf("the follower published artifacts itself: %v", entries)
	}
	// Every replica serves its metrics, leader election's included.
	for name, r := range map[string]*replica{"leader": leader, "follower": follower} {
		code, body := httpGet(t, "http://"+r.metricsAddr+"/metrics")
		if code != http.StatusOK || !strings.Contains(string(body), `leader_election_master_status{name="`+operator.LeaderElectionID+`"}`) {
			t.Fatalf("%s: /metrics: HTTP %d without the leader election metric:\n%s", name, code, tail(body, 2048))
		}
	}

	// A clean shutdown releases the Lease at once: once the leader has
	// stopped, the Lease is free (or already the follower's), not left to
	// expire.
	leader.stop()
	if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: operator.LeaderElectionID}, &lease); err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && *h == "leader" {
		t.Fatalf("the stopped leader still holds the Lease (renewed %v): not released on shutdown", lease.Spec.RenewTime)
	}
	select {
	case <-follower.mgr.Elected():
	case <-time.After(time.Minute):
		t.Fatal("the follower was not elected within a minute of the leader's shutdown")
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// TestRefusesToStartWithoutItsCRDs: on an API server that serves the PKO
// kinds but not PlanApproval (an upgrade whose CRDs were not applied), Setup
// fails at once naming the missing kind and how to install it, instead of
// waiting for a watch that never syncs.
func TestRefusesToStartWithoutItsCRDs(t *testing.T) {
	substrate.MustLocate(t)
	var pko []string
	for _, f := range []string{"pulumi.com_stacks.yaml", "pulumi.com_programs.yaml", "auto.pulumi.com_workspaces.yaml", "auto.pulumi.com_updates.yaml"} {
		pko = append(pko, filepath.Join(substrate.CRDDir(), f))
	}
	cp, err := substrate.StartControlPlaneEnv(&envtest.Environment{CRDInstallOptions: envtest.CRDInstallOptions{Paths: pko, ErrorIfPathMissing: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{Scheme: operator.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = operator.Setup(mgr, operator.Options{Runtime: operator.RuntimeLocal, LocalRoot: t.TempDir(), AgentBinary: "/nonexistent"})
	if err == nil || !strings.Contains(err.Error(), "the API server does not serve PlanApproval (stackflow.io/v1alpha1): apply this release's CRDs") {
		t.Fatalf("Setup without the PlanApproval CRD: %v", err)
	}
}
