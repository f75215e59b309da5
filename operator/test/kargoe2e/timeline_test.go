package kargoe2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/test/framework/kargo"
)

// timeline records when the test first observed each milestone of a
// release's way through the pipeline, sampling every 100 ms: Freight made,
// and per Stage the Stack's update succeeded, the Promotion Succeeded and
// the Freight verified. The figures are observations (±100 ms plus an API
// round trip), printed by report; they are never asserted against a time.
type timeline struct {
	mu   sync.Mutex
	seen map[string]time.Time
	// rounds counts the samples taken; round is broadcast after each.
	rounds int
	round  *sync.Cond
}

// milestone keys.
func freightMade(commit string) string           { return "freight " + commit }
func stackSucceeded(stage, commit string) string { return "stack " + stage + " " + commit }
func promotionSucceeded(stage, fr string) string { return "promotion " + stage + " " + fr }
func freightVerified(stage, fr string) string    { return "verified " + stage + " " + fr }

func (tl *timeline) get(key string) (time.Time, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	t, ok := tl.seen[key]
	return t, ok
}

func (tl *timeline) mark(key string, at time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if _, ok := tl.seen[key]; !ok {
		tl.seen[key] = at
	}
}

// settle waits until a sample that began after the call has been taken, so
// that what the test has just observed is in the timeline.
func (tl *timeline) settle() {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for target := tl.rounds + 2; tl.rounds < target; {
		tl.round.Wait()
	}
}

// record samples the pipeline until the test ends.
func (tl *timeline) record(t *testing.T, p *kargo.Pipeline) {
	tl.seen = map[string]time.Time{}
	tl.round = sync.NewCond(&tl.mu)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			tl.sample(ctx, p)
			tl.mu.Lock()
			tl.rounds++
			tl.round.Broadcast()
			tl.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

func (tl *timeline) sample(ctx context.Context, p *kargo.Pipeline) {
	now := time.Now()
	stacks := &pulumiv1.StackList{}
	if err := c.List(ctx, stacks, client.InNamespace(kargo.ExampleStackNamespace)); err == nil {
		for _, s := range stacks.Items {
			// The last update (an up, or preview's preview) succeeded at
			// the commit it attempted.
			if lu := s.Status.LastUpdate; lu != nil && lu.State == pulumiv1.SucceededStackStateMessage && lu.LastAttemptedCommit != "" {
				tl.mark(stackSucceeded(strings.TrimPrefix(s.Name, "web-"), lu.LastAttemptedCommit), now)
			}
		}
	}
	for _, st := range kargo.ExampleStages {
		stage, err := p.Stage(ctx, st)
		if err != nil {
			continue
		}
		if lp := stage.Status.LastPromotion; lp != nil && lp.Status.Phase == "Succeeded" {
			tl.mark(promotionSucceeded(st, lp.Freight.Name), now)
		}
	}
	for _, f := range p.AllFreight(ctx) {
		for _, cm := range f.Commits {
			tl.mark(freightMade(cm.ID), now)
		}
		for st := range f.Status.VerifiedIn {
			tl.mark(freightVerified(st, f.Name), now)
		}
	}
}

// report logs, for a commit: the time from its push to its Freight; per
// Stage, from the Freight (or, for a Stage promoted by a person, from its
// Promotion's creation, start) to the Stack's update succeeding, from there
// to the Promotion Succeeded (the wait step's latency), and from there to the
// Freight verified.
func (tl *timeline) report(t *testing.T, what, commit string, committed time.Time, freight string, starts map[string]time.Time) {
	t.Helper()
	tl.settle()
	round := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	var b strings.Builder
	ft, ok := tl.get(freightMade(commit))
	if !ok {
		t.Logf("latency of %s: Freight not seen", what)
		return
	}
	fmt.Fprintf(&b, "latency of %s (%.7s): push → Freight %s", what, commit, round(ft.Sub(committed)))
	var stages []string
	for st := range starts {
		stages = append(stages, st)
	}
	sort.Strings(stages)
	for _, st := range stages {
		start := starts[st]
		if start.IsZero() {
			start = ft
		}
		fmt.Fprintf(&b, "; %s:", st)
		at, ok := tl.get(stackSucceeded(st, commit))
		if !ok {
			b.WriteString(" Stack not seen succeeded")
			continue
		}
		fmt.Fprintf(&b, " → Stack succeeded %s", round(at.Sub(start)))
		pt, ok := tl.get(promotionSucceeded(st, freight))
		if !ok {
			continue
		}
		fmt.Fprintf(&b, " → Promotion Succeeded +%s", round(pt.Sub(at)))
		if vt, ok := tl.get(freightVerified(st, freight)); ok {
			fmt.Fprintf(&b, " → verified +%s", round(vt.Sub(pt)))
		}
	}
	t.Log(b.String())
}
