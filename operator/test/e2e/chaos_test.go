package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

// TestChaosOperatorKills advances 10 Stacks through 5 commits each (50
// updates, as promotions advancing spec.commit) while the operator process
// is SIGKILLed at random points and restarted. Every Stack converges to
// Ready at its last commit, and the backend history shows each (Stack,
// commit) applied exactly once: no update was lost or run twice, whatever
// the operator was doing when it died. STACKFLOW_CHAOS_SEED replays a run;
// the seed is printed on failure.
func TestChaosOperatorKills(t *testing.T) {
	const stacks, commits = 10, 5
	seed := time.Now().UnixNano()
	if v := os.Getenv("STACKFLOW_CHAOS_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chaos seed %d (replay with STACKFLOW_CHAOS_SEED=%d)", seed, seed)
		}
	})
	rng := rand.New(rand.NewSource(seed))
	e := newEnv(t)
	kc := kubeconfig(t)
	ctx := context.Background()
	repo := gitrepo.New(t)
	var shas []string
	for i := range commits {
		shas = append(shas, repo.Commit(t, fmt.Sprintf("v%d", i), map[string]string{
			"Pulumi.yaml": strings.Replace(stackProgram, "content: ${content}", fmt.Sprintf("content: v%d-${content}", i), 1)}))
	}
	var all []*pulumiv1.Stack
	for i := range stacks {
		name := fmt.Sprintf("chaos-%02d", i)
		s := newStack(e.ns, name, pulumiv1.StackSpec{Stack: name, GitSource: gitSpec(repo.URL(), "", shas[0]),
			Config: cfg("recordName", name, "content", name)})
		if err := cp.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		all = append(all, s)
	}

	// The chaos: the operator is killed after a random 1–8 s of life (its
	// start takes about a second, longer on a loaded machine) and started
	// again at once, until the Stacks are done.
	done := make(chan struct{})
	var kills int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			op := startOperatorProcess(t, e, kc)
			life := time.Duration(1000+rng.Intn(7000)) * time.Millisecond
			select {
			case <-done:
				op.kill()
				return
			case <-time.After(life):
				op.kill()
				kills++
			}
		}
	}()

	// Each Stack is promoted to the next commit once Ready at the previous.
	var mu sync.Mutex
	var failures []string
	var sw sync.WaitGroup
	for _, s := range all {
		sw.Add(1)
		go func(s *pulumiv1.Stack) {
			defer sw.Done()
			for k := range commits {
				if k > 0 {
					if err := updateCommit(s, shas[k]); err != nil {
						mu.Lock()
						failures = append(failures, fmt.Sprintf("%s: promote to %s: %v", s.Name, shas[k][:8], err))
						mu.Unlock()
						return
					}
				}
				if err := waitFor(s, 6*time.Minute, readyAt(shas[k])); err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s: at commit %d: %v", s.Name, k, err))
					mu.Unlock()
					return
				}
			}
		}(s)
	}
	sw.Wait()
	close(done)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("after %d operator kills:\n%s", kills, strings.Join(failures, "\n"))
	}
	for _, s := range all {
		perCommit := map[string]int{}
		for _, h := range stackHistory(t, e, repo, s.Name) {
			perCommit[h.Environment["git.head"]]++
		}
		for k, sha := range shas {
			if perCommit[sha] != 1 {
				t.Errorf("%s: commit %d (%s) applied %d times, want exactly once (history %v)", s.Name, k, sha[:8], perCommit[sha], perCommit)
			}
		}
		if got, _ := e.pe.Record(t, s.Name); got != fmt.Sprintf("v%d-%s", commits-1, s.Name) {
			t.Errorf("%s: record %q", s.Name, got)
		}
	}
	t.Logf("%d updates across %d Stacks converged through %d operator kills (seed %d)", stacks*commits, stacks, kills, seed)
}

// updateCommit advances a Stack's spec.commit, retrying on conflicts.
func updateCommit(s *pulumiv1.Stack, sha string) error {
	for attempt := 0; ; attempt++ {
		if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(s), s); err != nil {
			return err
		}
		s.Spec.Commit = sha
		err := cp.Client.Update(context.Background(), s)
		if err == nil || attempt == 20 || !strings.Contains(err.Error(), "the object has been modified") {
			return err
		}
	}
}

// waitFor polls the Stack until cond holds (for goroutines: no t.Fatal).
func waitFor(s *pulumiv1.Stack, timeout time.Duration, cond func(*pulumiv1.Stack) bool) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(s), s); err == nil && cond(s) {
			return nil
		}
		time.Sleep(300 * time.Millisecond)
	}
	return fmt.Errorf("timed out after %s (conditions %+v, lastUpdate %+v)", timeout, s.Status.Conditions, s.Status.LastUpdate)
}
