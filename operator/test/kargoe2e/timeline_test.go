package kargoe2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/test/framework/kargo"
)

// timeline records when the test first observed each milestone of a
// release's way through the pipeline, sampling every 100 ms: Freight made;
// per Stage its Promotion created, Running and each of its steps done; the
// Stack's spec.commit at the release (Argo CD synced the manifests), the
// Stack's Update created (the operator picked it up), Running and Complete
// (the agent and the engine), the Stack's update succeeded; the Promotion
// Succeeded and the Freight verified. The figures are observations (±100 ms
// plus an API round trip), printed by report; they are never asserted
// against a time.
type timeline struct {
	mu   sync.Mutex
	seen map[string]time.Time
	// rounds counts the samples taken; round is broadcast after each.
	rounds int
	round  *sync.Cond
	// updates maps an Update's name to the milestone suffix (stage and
	// commit) of the Stack update it runs.
	updates map[string]string
	// steps holds, per Promotion milestone suffix (stage and Freight), its
	// steps' kinds.
	steps map[string][]string
}

// milestone keys.
func freightMade(commit string) string           { return "freight " + commit }
func stackSucceeded(stage, commit string) string { return "stack " + stage + " " + commit }
func promotionSucceeded(stage, fr string) string { return "promotion " + stage + " " + fr }
func freightVerified(stage, fr string) string    { return "verified " + stage + " " + fr }
func promotionCreated(stage, fr string) string   { return "promotion-created " + stage + " " + fr }
func promotionRunning(stage, fr string) string   { return "promotion-running " + stage + " " + fr }
func stepDone(stage, fr string, i int) string    { return fmt.Sprintf("step %d %s %s", i, stage, fr) }
func stackPinned(stage, commit string) string    { return "pinned " + stage + " " + commit }
func updateCreated(stage, commit string) string  { return "update-created " + stage + " " + commit }
func updateRunning(stage, commit string) string  { return "update-running " + stage + " " + commit }
func updateComplete(stage, commit string) string { return "update-complete " + stage + " " + commit }

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
	tl.seen, tl.updates, tl.steps = map[string]time.Time{}, map[string]string{}, map[string][]string{}
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
			stage := strings.TrimPrefix(s.Name, "web-")
			// Argo CD applied the manifest pinning the release.
			if s.Spec.Commit != "" {
				tl.mark(stackPinned(stage, s.Spec.Commit), now)
			}
			// The operator created the Update running it.
			if cu := s.Status.CurrentUpdate; cu != nil && cu.Commit != "" && cu.Name != "" {
				tl.mark(updateCreated(stage, cu.Commit), now)
				tl.mu.Lock()
				tl.updates[cu.Name] = stage + " " + cu.Commit
				tl.mu.Unlock()
			}
			// The last update (an up, or preview's preview) succeeded at
			// the commit it attempted.
			if lu := s.Status.LastUpdate; lu != nil && lu.State == pulumiv1.SucceededStackStateMessage && lu.LastAttemptedCommit != "" {
				tl.mark(stackSucceeded(stage, lu.LastAttemptedCommit), now)
			}
		}
	}
	updates := &autov1alpha1.UpdateList{}
	if err := c.List(ctx, updates, client.InNamespace(kargo.ExampleStackNamespace)); err == nil {
		for _, u := range updates.Items {
			tl.mu.Lock()
			of, ok := tl.updates[u.Name]
			tl.mu.Unlock()
			if !ok {
				continue
			}
			stage, commit, _ := strings.Cut(of, " ")
			if apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeProgressing) || !u.Status.StartTime.IsZero() {
				tl.mark(updateRunning(stage, commit), now)
			}
			if apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeComplete) {
				tl.mark(updateRunning(stage, commit), now)
				tl.mark(updateComplete(stage, commit), now)
			}
		}
	}
	for _, pr := range p.AllPromotions(ctx) {
		st, fr := pr.Spec.Stage, pr.Spec.Freight
		tl.mark(promotionCreated(st, fr), now)
		tl.mu.Lock()
		if _, ok := tl.steps[st+" "+fr]; !ok {
			for _, step := range pr.Spec.Steps {
				tl.steps[st+" "+fr] = append(tl.steps[st+" "+fr], step.Uses)
			}
		}
		tl.mu.Unlock()
		if pr.Status.Phase != "" && pr.Status.Phase != "Pending" {
			tl.mark(promotionRunning(st, fr), now)
		}
		for i, m := range pr.Status.StepMeta {
			if m.Status == "Succeeded" || m.Status == "Skipped" {
				tl.mark(stepDone(st, fr, i), now)
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

// report logs, for a commit: the time from its push to its Freight and, per
// Stage, from the Freight (or, for a Stage promoted by a person, from the
// Promotion's creation, start) each milestone in the order seen, with the
// time since the one before: the Promotion created and Running, each step
// done (named by its kind), the Stack pinned to the commit (Argo CD's sync),
// its Update created, Running and Complete, the Stack's update succeeded,
// the Promotion Succeeded, the Freight verified. engine gives, per Stage,
// the engine's own time for the commit as the backend recorded it (whole
// seconds), or 0.
func (tl *timeline) report(t *testing.T, what, commit string, committed time.Time, freight string, starts map[string]time.Time, engine func(stage, commit string) time.Duration) {
	t.Helper()
	tl.settle()
	round := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	ft, ok := tl.get(freightMade(commit))
	if !ok {
		t.Logf("latency of %s: Freight not seen", what)
		return
	}
	t.Logf("latency of %s (%.7s): push → Freight %s", what, commit, round(ft.Sub(committed)))
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
		type seen struct {
			label string
			at    time.Time
		}
		var ms []seen
		add := func(label, key string) {
			if at, ok := tl.get(key); ok {
				ms = append(ms, seen{label, at})
			}
		}
		add("Promotion created", promotionCreated(st, freight))
		add("Running", promotionRunning(st, freight))
		tl.mu.Lock()
		kinds := tl.steps[st+" "+freight]
		tl.mu.Unlock()
		for i, kind := range kinds {
			add(kind, stepDone(st, freight, i))
		}
		add("Stack pinned by Argo CD", stackPinned(st, commit))
		add("Update created", updateCreated(st, commit))
		add("Update Running", updateRunning(st, commit))
		add("Update Complete", updateComplete(st, commit))
		add("Stack succeeded", stackSucceeded(st, commit))
		add("Promotion Succeeded", promotionSucceeded(st, freight))
		add("verified", freightVerified(st, freight))
		// In the order seen; a step seen done in the same sample as a later
		// milestone stays after it (stable).
		sort.SliceStable(ms, func(i, j int) bool { return ms[i].at.Before(ms[j].at) })
		var b strings.Builder
		fmt.Fprintf(&b, "%s, from %s:", st, map[bool]string{true: "the Freight", false: "the Promotion's creation by a person"}[starts[st].IsZero()])
		prev := start
		for _, m := range ms {
			if m.at.Before(start) {
				continue // pinned earlier by another release
			}
			fmt.Fprintf(&b, " %s +%s;", m.label, round(m.at.Sub(prev)))
			prev = m.at
		}
		fmt.Fprintf(&b, " total %s", round(prev.Sub(start)))
		run, rok := tl.get(updateRunning(st, commit))
		done, dok := tl.get(updateComplete(st, commit))
		if rok && dok {
			fmt.Fprintf(&b, "; Update Running → Complete %s", round(done.Sub(run)))
			if e := engine(st, commit); e > 0 {
				fmt.Fprintf(&b, ", of which the engine (backend history, whole seconds) %s", e)
			} else {
				b.WriteString(" (no record in the backend's history: previews are not recorded)")
			}
		}
		t.Log(b.String())
	}
}
