package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

// BenchmarkAgentMemory runs many sequential Updates through one Workspace —
// the operator binary in its own process, a real local agent, real pulumi — and
// reports the resident memory of the agent and of the operator after a warm-up
// and at the end (the goal: flat), and the Updates per second.
//
// After a first up creating the record, every Update is a real one-resource
// change: the Workspace's content config,
// a secret, gets a new value first (a SelectStack with a new secret, the
// redactor's replacement path), then an up deploys it. Finished Updates expire
// after 1 s (ttlAfterCompleted). envtest runs no garbage collector, so the
// benchmark deletes the outputs Secrets of expired Updates itself, as a
// cluster's would through their owner reference.
//
//	go test -run '^$' -bench AgentMemory -benchtime 1x -timeout 40m ./operator/test/e2e/
//
// STACKFLOW_BENCH_UPDATES overrides the number of Updates (default 500). The
// operator serves its profiles on loopback (--pprof-bind-address): each line
// gives its goroutine count, and STACKFLOW_BENCH_HEAP_DIR=<dir> saves its heap
// profile (after a GC) there at each line, heap-<updates>.pb.gz, for
// `go tool pprof -sample_index=inuse_space -diff_base <dir>/heap-0010.pb.gz
// <dir>/heap-0500.pb.gz`.
func BenchmarkAgentMemory(b *testing.B) {
	n := 500
	if v := os.Getenv("STACKFLOW_BENCH_UPDATES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 20 {
			b.Fatalf("STACKFLOW_BENCH_UPDATES=%q: want a number of updates, at least 20", v)
		}
	}
	const warmup = 10
	for range b.N {
		benchAgentMemory(b, n, warmup)
	}
}

func benchAgentMemory(b *testing.B, n, warmup int) {
	b.StopTimer()
	e := newEnv(b)
	var agent int
	pprofAddr := freeAddr(b)
	op := startOperatorProcess(b, e, kubeconfig(b), "--pprof-bind-address="+pprofAddr)
	heapDir := os.Getenv("STACKFLOW_BENCH_HEAP_DIR")
	// figures is one line of the table: the RSS of both processes, its
	// anonymous part (the heap, stacks: what a leak grows; the rest is pages
	// of the binary, which come and go with the machine's memory pressure)
	// and the operator's goroutines, its heap profile saved when asked.
	figures := func(updates int) string {
		if heapDir != "" {
			saveProfile(b, pprofAddr, "heap?gc=1", filepath.Join(heapDir, fmt.Sprintf("heap-%04d.pb.gz", updates)))
		}
		pid := op.cmd.Process.Pid
		return fmt.Sprintf("agent RSS %s (anonymous %s), operator RSS %s (anonymous %s), operator goroutines %d",
			mib(rssKiB(b, agent)), mib(statusKiB(b, agent, "RssAnon")), mib(rssKiB(b, pid)), mib(statusKiB(b, pid, "RssAnon")), goroutines(b, pprofAddr))
	}
	repo := gitrepo.New(b)
	repo.Commit(b, "program", map[string]string{"Pulumi.yaml": recordProgram})
	ctx := context.Background()

	secret := true
	config := func(i int) []autov1alpha1.ConfigItem {
		items := stackConfig("content", fmt.Sprintf("secret-content-%04d", i), "recordName", "mem")
		items[0].Secret = &secret
		return items
	}
	ws := newWorkspace(e.ns, "mem", repo.URL(), config(0))
	if err := cp.Client.Create(ctx, ws); err != nil {
		b.Fatal(err)
	}
	waitWorkspaceReady(b, ws, 3*time.Minute)
	agent = agentPID(b, e, ws.Name)
	if first := runUpdate(b, newUpdate(e.ns, "up-0000", ws.Name, autov1alpha1.UpType), 3*time.Minute); !succeeded(first) {
		b.Fatalf("first up: %s %q", reason(first), first.Status.Message)
	}

	ttl := &metav1.Duration{Duration: time.Second}
	var startAgent, startOp int64
	var start time.Time
	for i := 1; i <= n; i++ {
		if i == warmup+1 {
			startAgent, startOp = rssKiB(b, agent), rssKiB(b, op.cmd.Process.Pid)
			b.Logf("after %d warm-up updates: %s", warmup, figures(warmup))
			start = time.Now()
			b.StartTimer()
		}
		mutate(b, ws, func() { ws.Spec.Stacks[0].Config = config(i) })
		poll(b, 3*time.Minute, fmt.Sprintf("workspace %s ready at generation %d", ws.Name, ws.Generation), func() bool {
			if err := get(b, ws); err != nil {
				return false
			}
			return ws.Status.ObservedGeneration == ws.Generation && apimeta.IsStatusConditionTrue(ws.Status.Conditions, autov1alpha1.WorkspaceReady)
		})
		u := newUpdate(e.ns, fmt.Sprintf("up-%04d", i), ws.Name, autov1alpha1.UpType)
		u.Spec.TtlAfterCompleted = ttl
		if err := cp.Client.Create(ctx, u); err != nil {
			b.Fatal(err)
		}
		poll(b, 3*time.Minute, "update "+u.Name+" complete", func() bool {
			return get(b, u) == nil && apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeComplete)
		})
		if !succeeded(u) || u.Status.Changes["update"] != 1 {
			b.Fatalf("%s: %s %q, changes %v; want a succeeded one-resource update", u.Name, reason(u), u.Status.Message, u.Status.Changes)
		}
		collectOutputSecrets(b, e.ns)
		if i%50 == 0 {
			// Also on stderr at once: a benchmark's log is printed only when
			// it ends, and a long run cut short should still tell its trend.
			line := fmt.Sprintf("after %d updates (%s): %s", i, time.Since(start).Round(time.Second), figures(i))
			b.Log(line)
			fmt.Fprintln(os.Stderr, "BenchmarkAgentMemory:", line)
		}
	}
	b.StopTimer()
	elapsed := time.Since(start)
	if n%50 != 0 {
		b.Logf("after %d updates: %s", n, figures(n))
	}
	if got := agentPID(b, e, ws.Name); got != agent {
		b.Fatalf("the agent was replaced during the run (pid %d, then %d): its memory figures mean nothing", agent, got)
	}
	endAgent, endOp := rssKiB(b, agent), rssKiB(b, op.cmd.Process.Pid)
	measured := n - warmup
	rate := float64(measured) / elapsed.Seconds()
	b.Logf("after %d updates: agent RSS %s (peak %s), operator RSS %s (peak %s); %d measured updates in %s, %.2f updates/s",
		n, mib(endAgent), mib(statusKiB(b, agent, "VmHWM")), mib(endOp), mib(statusKiB(b, op.cmd.Process.Pid, "VmHWM")), measured, elapsed.Round(time.Second), rate)
	if got, _ := e.pe.Record(b, "mem"); got != fmt.Sprintf("secret-content-%04d", n) {
		b.Fatalf("record = %q after the last update", got)
	}
	b.ReportMetric(float64(startAgent)/1024, "agent-start-MiB")
	b.ReportMetric(float64(endAgent)/1024, "agent-end-MiB")
	b.ReportMetric(float64(startOp)/1024, "operator-start-MiB")
	b.ReportMetric(float64(endOp)/1024, "operator-end-MiB")
	b.ReportMetric(rate, "updates/s")
}

// poll checks cond every 20 ms (tighter than eventually, so the measured rate is
// the operator's, not the poll interval's).
func poll(b *testing.B, timeout time.Duration, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// collectOutputSecrets deletes the outputs Secrets whose Update is gone, as the
// garbage collector envtest lacks would.
func collectOutputSecrets(b *testing.B, ns string) {
	b.Helper()
	ctx := context.Background()
	var secrets corev1.SecretList
	if err := cp.Client.List(ctx, &secrets, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	for i := range secrets.Items {
		s := &secrets.Items[i]
		for _, ref := range s.OwnerReferences {
			if ref.Kind != "Update" {
				continue
			}
			err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, &autov1alpha1.Update{})
			if apierrors.IsNotFound(err) {
				if err := cp.Client.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
					b.Fatal(err)
				}
			} else if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// rssKiB is the process's resident set size.
func rssKiB(b *testing.B, pid int) int64 { return statusKiB(b, pid, "VmRSS") }

// statusKiB reads a "<field>: <n> kB" line of /proc/<pid>/status.
func statusKiB(b *testing.B, pid int, field string) int64 {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatalf("read memory of pid %d: %v", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				b.Fatalf("parse %s of pid %d: %v", field, pid, err)
			}
			return kib
		}
	}
	b.Fatalf("pid %d has no %s in /proc/%d/status", pid, field, pid)
	return 0
}

// saveProfile writes the operator's profile at path (under /debug/pprof/) to
// file.
func saveProfile(b *testing.B, addr, path, file string) {
	b.Helper()
	resp, err := http.Get("http://" + addr + "/debug/pprof/" + path)
	if err != nil {
		b.Fatalf("profile %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("profile %s: %s", path, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(file, body, 0o644); err != nil {
		b.Fatal(err)
	}
}

// goroutines is the operator's goroutine count (the first line of its
// goroutine profile in text: "goroutine profile: total N").
func goroutines(b *testing.B, addr string) int {
	b.Helper()
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		b.Fatalf("goroutine profile: %v", err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		b.Fatalf("goroutine profile: %v", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "goroutine profile: total")))
	if err != nil {
		b.Fatalf("goroutine profile: first line %q", line)
	}
	return n
}

func mib(kib int64) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }
