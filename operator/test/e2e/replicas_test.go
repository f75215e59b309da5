package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

// replica is one operator process of a replicated deployment.
type replica struct {
	*operatorProcess
	identity, artifactAddr, probeAddr, metricsAddr string
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		// A port closed here is free again at once: the kernel may hand it
		// out twice (it did, to two replicas' probe servers), so never
		// give the same one to two processes of this test binary.
		if !handedOut.addrs[addr] {
			handedOut.addrs[addr] = true
			return addr
		}
	}
	t.Fatal("no loopback port left that this test binary has not handed out")
	return ""
}

// handedOut holds the addresses freeAddr returned.
var handedOut = struct {
	sync.Mutex
	addrs map[string]bool
}{addrs: map[string]bool{}}

// startReplica runs the operator binary with leader election (short lease
// settings) in the test's namespace, sharing the local runtime's root with the
// other replicas so that a new leader adopts the running agents.
func startReplica(t testing.TB, e *env, kubeconfig, identity string) *replica {
	t.Helper()
	r := &replica{identity: identity, artifactAddr: freeAddr(t), probeAddr: freeAddr(t), metricsAddr: freeAddr(t)}
	var agentEnv []string
	for k, v := range e.opts.AgentEnv {
		agentEnv = append(agentEnv, k+"="+v)
	}
	cmd := exec.Command(filepath.Join(bin, "operator"),
		"--kubeconfig="+kubeconfig, "--workspace-runtime=local", "--local-root="+e.opts.LocalRoot,
		"--agent-binary="+e.opts.AgentBinary, "--pulumi-root="+e.opts.PulumiRoot,
		"--agent-env="+strings.Join(agentEnv, ","), "--local-restart-backoff=1s",
		"--watch-namespaces="+e.ns, "--stack-resync-override=2s",
		"--metrics-bind-address="+r.metricsAddr, "--metrics-auth=none", "--health-probe-bind-address="+r.probeAddr,
		"--artifact-addr="+r.artifactAddr, "--artifact-dir="+t.TempDir(),
		"--leader-elect", "--leader-elect-namespace="+e.ns, "--leader-elect-identity="+identity,
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s")
	logf, err := os.OpenFile(filepath.Join(e.opts.LocalRoot, "operator-"+identity+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.operatorProcess = &operatorProcess{cmd: cmd}
	t.Cleanup(r.kill)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s log (last 4 KiB):\n%s", identity, tail(b, 4096))
		}
	})
	return r
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// httpGet fetches a URL with a bounded client, returning the status and body.
func httpGet(url string) (int, []byte, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// leaseHolder reads the operator's Lease in ns ("" while there is none).
func leaseHolder(t testing.TB, ns string) (string, error) {
	t.Helper()
	var l coordinationv1.Lease
	if err := cp.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: operator.LeaderElectionID}, &l); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

// TestReplicasTakeOver: two operator processes with leader election. Both are
// ready and serve a Program's artifact (the follower rendering it from its
// cache). The leader is killed (SIGKILL) during a Stack's slow up; the other
// acquires the Lease within the lease duration, re-attaches to the run, and
// later deploys a pushed commit. The backend history shows each commit applied
// exactly once.
func TestReplicasTakeOver(t *testing.T) {
	e := newEnv(t)
	kc := kubeconfig(t)
	repo := gitrepo.New(t)
	sha1 := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": recordProgram})
	ctx := context.Background()

	replicas := map[string]*replica{}
	for _, id := range []string{"replica-a", "replica-b"} {
		replicas[id] = startReplica(t, e, kc, id)
	}
	var leader, follower *replica
	eventually(t, 2*time.Minute, "a replica to acquire the Lease", func() (bool, error) {
		h, err := leaseHolder(t, e.ns)
		if r, ok := replicas[h]; ok {
			leader = r
		}
		return leader != nil, err
	})
	for id, r := range replicas {
		if r != leader {
			follower = replicas[id]
		}
	}
	t.Logf("leader %s, follower %s", leader.identity, follower.identity)

	// Readiness does not depend on leading: both replicas are ready.
	for _, r := range replicas {
		eventually(t, time.Minute, r.identity+" ready", func() (bool, error) {
			code, body, err := httpGet("http://" + r.probeAddr + "/readyz")
			return code == http.StatusOK, fmt.Errorf("HTTP %d %q (%v)", code, body, err)
		})
	}
	if h, err := leaseHolder(t, e.ns); err != nil || h != leader.identity {
		t.Fatalf("lease holder = %q (%v), want %s while checking readiness", h, err, leader.identity)
	}
	// Each process's metrics say whether it leads.
	for r, want := range map[*replica]string{leader: "1", follower: "0"} {
		eventually(t, 30*time.Second, r.identity+" leader metric "+want, func() (bool, error) {
			code, body, err := httpGet("http://" + r.metricsAddr + "/metrics")
			line := `leader_election_master_status{name="` + operator.LeaderElectionID + `"} ` + want
			return code == http.StatusOK && strings.Contains(string(body), line+"\n"), fmt.Errorf("HTTP %d (%v), no %q", code, err, line)
		})
	}

	// A Program's artifact, published by the leader, is served by both.
	prog := &pulumiv1.Program{}
	prog.Namespace, prog.Name = e.ns, "shared"
	prog.Program.Outputs = map[string]pulumiv1.Expression{"greeting": {Raw: []byte(`"hello"`)}}
	if err := cp.Client.Create(ctx, prog); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the program's artifact", func() (bool, error) {
		err := get(t, prog)
		return err == nil && prog.Status.Artifact != nil, err
	})
	for _, r := range []*replica{leader, follower} {
		code, body, err := httpGet("http://" + r.artifactAddr + "/" + prog.Status.Artifact.Path)
		if err != nil || code != http.StatusOK {
			t.Fatalf("%s: GET %s: HTTP %d (%v)", r.identity, prog.Status.Artifact.Path, code, err)
		}
		if sum := sha256.Sum256(body); "sha256:"+hex.EncodeToString(sum[:]) != prog.Status.Artifact.Digest {
			t.Fatalf("%s served %d bytes that are not %s", r.identity, len(body), prog.Status.Artifact.Digest)
		}
	}

	// A Stack whose up takes 15 s; the leader dies during it.
	s := newStack(e.ns, "ha", pulumiv1.StackSpec{Stack: "ha", GitSource: gitSpec(repo.URL(), "main", ""),
		Config: cfg("recordName", "ha", "content", "one", "sleep", 15)})
	if err := cp.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	var running string
	eventually(t, 3*time.Minute, "the stack's up in progress", func() (bool, error) {
		var ups autov1alpha1.UpdateList
		if err := cp.Client.List(ctx, &ups, client.InNamespace(e.ns)); err != nil {
			return false, err
		}
		for _, u := range ups.Items {
			if u.Spec.Type == autov1alpha1.UpType && apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeProgressing) {
				running = u.Name
				return true, nil
			}
		}
		return false, fmt.Errorf("%d updates, none progressing", len(ups.Items))
	})
	killed := time.Now()
	leader.kill()
	eventually(t, time.Minute, follower.identity+" to acquire the Lease", func() (bool, error) {
		h, err := leaseHolder(t, e.ns)
		return h == follower.identity, fmt.Errorf("holder %q (%v)", h, err)
	})
	takeover := time.Since(killed)
	t.Logf("takeover: %s acquired the Lease %s after %s was killed during update %s (lease duration 4s, retry period 1s)",
		follower.identity, takeover.Round(10*time.Millisecond), leader.identity, running)
	// The Lease was last renewed before the kill: the follower may only take it
	// once the lease duration has passed since then, and it polls every retry
	// period; with a slow API server allow a few more periods.
	if takeover > 20*time.Second {
		t.Fatalf("takeover took %s, want within the lease duration plus a few retry periods", takeover)
	}
	waitStack(t, s, 3*time.Minute, "ready at the first commit under the new leader", readyAt(sha1))
	// The run in flight at the kill is the one that applied the commit: the
	// new leader re-attached to it instead of starting another.
	u := &autov1alpha1.Update{}
	u.Namespace, u.Name = e.ns, running
	if err := get(t, u); err != nil {
		t.Fatal(err)
	}
	if !succeeded(u) || !u.Status.EndTime.After(killed) {
		t.Fatalf("update %s in flight at the kill: %s %q, ended %s (killed at %s)", running, reason(u), u.Status.Message, u.Status.EndTime.Format(time.RFC3339Nano), killed.Format(time.RFC3339Nano))
	}

	program2 := strings.Replace(recordProgram, "content: ${content}", "content: pushed-${content}", 1)
	sha2 := repo.Commit(t, "v2", map[string]string{"Pulumi.yaml": program2})
	waitStack(t, s, 3*time.Minute, "ready at the pushed commit", readyAt(sha2))
	if got, _ := e.pe.Record(t, "ha"); got != "pushed-one" {
		t.Fatalf("record = %q, want pushed-one", got)
	}
	if h, _ := leaseHolder(t, e.ns); h != follower.identity {
		t.Fatalf("lease holder = %q after the push, want %s", h, follower.identity)
	}

	// Each commit applied exactly once.
	applied := map[string]int{}
	for _, h := range stackHistory(t, e, repo, "ha") {
		if h.Kind == "update" {
			applied[h.Environment["git.head"]]++
			if h.Result != "succeeded" {
				t.Errorf("update %d at %s: %s", h.Version, h.Environment["git.head"], h.Result)
			}
		}
	}
	if applied[sha1] != 1 || applied[sha2] != 1 || len(applied) != 2 {
		t.Fatalf("updates per commit = %v, want exactly one for %s and one for %s", applied, sha1, sha2)
	}
	t.Logf("updates per commit: %v", applied)
}
