package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

func TestRunRetentionEvict(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tests := []struct {
		name     string
		policy   RunRetention
		finished []finishedRun
		now      time.Time
		want     []string
	}{
		{
			name:   "nothing finished",
			policy: RunRetention{Retention: time.Hour, MaxFinished: 2},
			now:    at(0),
		},
		{
			name:     "within retention and under the cap: all kept",
			policy:   RunRetention{Retention: time.Hour, MaxFinished: 3},
			finished: []finishedRun{{"a", at(0)}, {"b", at(time.Minute)}},
			now:      at(59 * time.Minute),
		},
		{
			name:     "exactly at the retention: kept",
			policy:   RunRetention{Retention: time.Hour, MaxFinished: 3},
			finished: []finishedRun{{"a", at(0)}},
			now:      at(time.Hour),
		},
		{
			name:     "past the retention: dropped",
			policy:   RunRetention{Retention: time.Hour, MaxFinished: 3},
			finished: []finishedRun{{"old", at(0)}, {"new", at(30 * time.Minute)}},
			now:      at(time.Hour + time.Second),
			want:     []string{"old"},
		},
		{
			name:     "over the cap: the earliest ended go first, whatever the order given",
			policy:   RunRetention{Retention: time.Hour, MaxFinished: 2},
			finished: []finishedRun{{"c", at(3 * time.Second)}, {"a", at(1 * time.Second)}, {"d", at(4 * time.Second)}, {"b", at(2 * time.Second)}},
			now:      at(5 * time.Second),
			want:     []string{"a", "b"},
		},
		{
			name:     "expired and over the cap: expired counted once",
			policy:   RunRetention{Retention: time.Minute, MaxFinished: 1},
			finished: []finishedRun{{"x", at(0)}, {"y", at(90 * time.Second)}, {"z", at(100 * time.Second)}},
			now:      at(110 * time.Second),
			want:     []string{"x", "y"},
		},
		{
			name:     "ties in end time broken by ID",
			policy:   RunRetention{Retention: time.Hour, MaxFinished: 1},
			finished: []finishedRun{{"b", at(0)}, {"a", at(0)}},
			now:      at(time.Second),
			want:     []string{"a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.policy.evict(tt.finished, tt.now)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("evict = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRunRetentionDefaults(t *testing.T) {
	got := RunRetention{}.withDefaults()
	if got.Retention != DefaultFinishedRunRetention || got.MaxFinished != DefaultMaxFinishedRuns {
		t.Fatalf("defaults = %+v", got)
	}
	set := RunRetention{Retention: time.Minute, MaxFinished: 3}
	if got := set.withDefaults(); got != set {
		t.Fatalf("set fields changed to %+v", got)
	}
}

// fakeClock is a settable clock, safe for the server's goroutines.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestServerEvictsFinishedRuns drives the run registry through the real RPC
// methods with an instant runner: a thousand finished runs leave only the
// newest MaxFinished findable, a running one is never evicted however old, and
// the retention period empties the registry of finished runs.
func TestServerEvictsFinishedRuns(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := newServer(logr.Discard(), newRedactor(), RunRetention{Retention: time.Hour, MaxFinished: 5})
	s.now = clock.Now
	release := make(chan struct{})
	s.runner = func(ctx context.Context, _ logr.Logger, _ *run, req *agentv1.StartOperationRequest) *agentv1.Operation {
		if req.GetStackName() == "slow" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		r := &agentv1.Operation{State: agentv1.OperationState_OPERATION_STATE_SUCCEEDED, Message: "up succeeded"}
		// Each run ends a second after the previous one.
		clock.Advance(time.Second)
		return r
	}
	s.configKeys["dev"], s.configKeys["slow"] = map[string]bool{}, map[string]bool{}
	ctx := context.Background()
	startAndWait := func(id, stack string, wait bool) {
		t.Helper()
		op, err := s.StartOperation(ctx, &agentv1.StartOperationRequest{UpdateId: id, StackName: stack, Type: agentv1.OperationType_OPERATION_TYPE_UP})
		if err != nil || op.State != agentv1.OperationState_OPERATION_STATE_RUNNING {
			t.Fatalf("start %s = %v, %v", id, op, err)
		}
		if !wait {
			return
		}
		s.mu.Lock()
		r := s.runs[id]
		s.mu.Unlock()
		<-r.done
	}
	state := func(id string) agentv1.OperationState {
		t.Helper()
		op, err := s.GetOperation(ctx, &agentv1.GetOperationRequest{UpdateId: id})
		if err != nil {
			t.Fatal(err)
		}
		return op.State
	}

	startAndWait("long", "slow", false)
	const n = 1000
	for i := range n {
		startAndWait(fmt.Sprintf("up-%d", i), "dev", true)
	}
	s.pruneRuns() // the last run's own prune may still be on its way
	s.mu.Lock()
	size := len(s.runs)
	s.mu.Unlock()
	if size != 5+1 {
		t.Fatalf("after %d finished runs the registry holds %d, want the 5 newest finished and the running one", n, size)
	}
	for i := n - 5; i < n; i++ {
		if got := state(fmt.Sprintf("up-%d", i)); got != agentv1.OperationState_OPERATION_STATE_SUCCEEDED {
			t.Fatalf("recent run up-%d = %v, want its result", i, got)
		}
	}
	for _, id := range []string{"up-0", fmt.Sprintf("up-%d", n-6)} {
		if got := state(id); got != agentv1.OperationState_OPERATION_STATE_UNKNOWN {
			t.Fatalf("old run %s = %v, want it evicted (UNKNOWN)", id, got)
		}
	}
	if got := state("long"); got != agentv1.OperationState_OPERATION_STATE_RUNNING {
		t.Fatalf("running run = %v, want it kept", got)
	}

	// Past the retention, the next run's prune drops every finished run but
	// itself; the running one stays.
	clock.Advance(2 * time.Hour)
	startAndWait("after-idle", "dev", true)
	s.pruneRuns()
	for id, want := range map[string]agentv1.OperationState{
		"after-idle":              agentv1.OperationState_OPERATION_STATE_SUCCEEDED,
		fmt.Sprintf("up-%d", n-1): agentv1.OperationState_OPERATION_STATE_UNKNOWN,
		"long":                    agentv1.OperationState_OPERATION_STATE_RUNNING,
	} {
		if got := state(id); got != want {
			t.Fatalf("%s = %v, want %v", id, got, want)
		}
	}

	// The long run, once finished, is kept like any other.
	close(release)
	s.mu.Lock()
	r := s.runs["long"]
	s.mu.Unlock()
	<-r.done
	s.pruneRuns()
	if got := state("long"); got != agentv1.OperationState_OPERATION_STATE_SUCCEEDED {
		t.Fatalf("finished long run = %v, want its result", got)
	}
}

// TestSelectStackAgainWhileBusy: the configuration already applied is
// accepted again at once, even while an update runs on the stack (an
// operator that restarted forgot what it applied and asks again); another
// configuration waits for the update.
func TestSelectStackAgainWhileBusy(t *testing.T) {
	s := newServer(logr.Discard(), newRedactor(), RunRetention{})
	applied := &agentv1.SelectStackRequest{StackName: "dev", Create: true, Config: []*agentv1.ConfigItem{
		{Key: "content", Source: &agentv1.ConfigItem_ValueJson{ValueJson: `"v1"`}}}}
	s.selected["dev"] = selectDigest(applied)
	s.busy["dev"] = "update-1"
	again := &agentv1.SelectStackRequest{StackName: "dev", Create: true, Config: []*agentv1.ConfigItem{
		{Key: "content", Source: &agentv1.ConfigItem_ValueJson{ValueJson: `"v1"`}}}}
	if _, err := s.SelectStack(context.Background(), again); err != nil {
		t.Fatalf("the applied configuration again while busy: %v", err)
	}
	changed := &agentv1.SelectStackRequest{StackName: "dev", Create: true, Config: []*agentv1.ConfigItem{
		{Key: "content", Source: &agentv1.ConfigItem_ValueJson{ValueJson: `"v2"`}}}}
	if _, err := s.SelectStack(context.Background(), changed); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a new configuration while busy = %v, want FailedPrecondition", err)
	}
}
