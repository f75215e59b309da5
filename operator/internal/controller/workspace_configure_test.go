package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

func TestConfigurePolicy(t *testing.T) {
	p := defaultConfigurePolicy
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	record := func(gen int64, since time.Time, attempts int32) *autov1alpha1.WorkspaceConfigurationFailure {
		return &autov1alpha1.WorkspaceConfigurationFailure{Generation: gen, Since: metav1.NewTime(since), Attempts: attempts}
	}
	locked := status.Error(codes.Unavailable, "select stack dev: could not create stack: the stack is currently locked by 1 lock(s)")
	cases := []struct {
		name string
		err  error
		prev *autov1alpha1.WorkspaceConfigurationFailure
		now  time.Time
		want configureDecision
	}{
		{name: "first failure", err: locked, now: t0,
			want: configureDecision{Record: record(3, t0, 1), After: 5 * time.Second}},
		{name: "second failure: the backoff doubles", err: locked, prev: record(3, t0, 1), now: t0.Add(5 * time.Second),
			want: configureDecision{Record: record(3, t0, 2), After: 10 * time.Second}},
		{name: "five failures within two minutes: not stalled yet", err: locked, prev: record(3, t0, 4), now: t0.Add(75 * time.Second),
			want: configureDecision{Record: record(3, t0, 5), After: 80 * time.Second}},
		{name: "two minutes of failures, fifth attempt: stalled, still retried", err: locked, prev: record(3, t0, 4), now: t0.Add(2 * time.Minute),
			want: configureDecision{Record: record(3, t0, 5), Stalled: true, After: 80 * time.Second}},
		{name: "a burst of attempts (operator restarts) does not stall", err: locked, prev: record(3, t0, 20), now: t0.Add(30 * time.Second),
			want: configureDecision{Record: record(3, t0, 21), After: 5 * time.Minute}},
		{name: "one slow attempt does not stall", err: status.Error(codes.DeadlineExceeded, "context deadline exceeded"), prev: record(3, t0, 1), now: t0.Add(3 * time.Minute),
			want: configureDecision{Record: record(3, t0, 2), After: 10 * time.Second}},
		{name: "the backoff is capped", err: locked, prev: record(3, t0, 30), now: t0.Add(time.Hour),
			want: configureDecision{Record: record(3, t0, 31), Stalled: true, After: 5 * time.Minute}},
		{name: "failures of an older generation do not count", err: locked, prev: record(2, t0, 9), now: t0.Add(time.Hour),
			want: configureDecision{Record: record(3, t0.Add(time.Hour), 1), After: 5 * time.Second}},
		{name: "an agent not answering counts", err: status.Error(codes.Unavailable, "connection refused"), prev: record(3, t0, 1), now: t0.Add(5 * time.Second),
			want: configureDecision{Record: record(3, t0, 2), After: 10 * time.Second}},
		{name: "invalid configuration: stalled at once, retried by a new spec", err: status.Error(codes.InvalidArgument, "set configuration of dev: bad key"), prev: record(3, t0, 2), now: t0,
			want: configureDecision{Stalled: true}},
		{name: "missing stack with create off: stalled at once", err: status.Error(codes.NotFound, "stack dev does not exist and create is off"), now: t0,
			want: configureDecision{Stalled: true}},
		{name: "an update runs: waiting, not a failure", err: status.Error(codes.FailedPrecondition, "stack dev is busy with update dev-7"), prev: record(3, t0, 4), now: t0.Add(time.Hour),
			want: configureDecision{Waiting: true, After: 5 * time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := p.decide(tc.err, tc.prev, 3, tc.now)
			if got.Waiting != tc.want.Waiting || got.Stalled != tc.want.Stalled || got.After != tc.want.After || !sameRecord(got.Record, tc.want.Record) {
				t.Fatalf("decide = %+v (record %+v), want %+v (record %+v)", got, got.Record, tc.want, tc.want.Record)
			}
		})
	}
}

func sameRecord(a, b *autov1alpha1.WorkspaceConfigurationFailure) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Generation == b.Generation && a.Since.Equal(&b.Since) && a.Attempts == b.Attempts
}

// selectAgent answers SelectStack with err[stack] (nil: success); no other
// call is expected.
type selectAgent struct {
	agentv1.AgentClient
	err map[string]error
}

func (a *selectAgent) SelectStack(_ context.Context, req *agentv1.SelectStackRequest, _ ...grpc.CallOption) (*agentv1.SelectStackResponse, error) {
	if err := a.err[req.GetStackName()]; err != nil {
		return nil, err
	}
	return &agentv1.SelectStackResponse{StackName: req.GetStackName()}, nil
}

// TestConfigurationFailureEndsStalled: a stack whose creation keeps failing
// (the chaos test's `select stack chaos-02: failed to create stack`) shows
// the agent's error with its attempts, is retried with backoff — across
// operator restarts, since the count is in status — and ends Stalled with
// that reason instead of Reconciling for ever; it is still retried, and a
// success clears it all.
func TestConfigurationFailureEndsStalled(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	now := t0
	lockErr := "select stack b: could not create stack: the stack is currently locked by 1 lock(s) (file:///backend/.pulumi/locks/organization/p/b/x.json: created by ci@elsewhere (pid 7))"
	agent := &selectAgent{err: map[string]error{"b": status.Error(codes.Unavailable, lockErr)}}
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ns", Generation: 3},
		Spec: autov1alpha1.WorkspaceSpec{Stacks: []autov1alpha1.WorkspaceStack{{Name: "a"}, {Name: "b"}}}}
	attempt := func() (bool, time.Duration) {
		t.Helper()
		// A new reconciler each time: an operator restarted between
		// attempts decides from the status alone.
		r := &WorkspaceReconciler{Now: func() time.Time { return now }}
		outcome := r.reconcileConfiguration(context.Background(), &workspaceScope{ws: ws, agent: agent, info: &agentv1.InfoResponse{Instance: "agent-1"}})
		if outcome == nil {
			return true, 0
		}
		res, err := r.finisher().summarize(ws, outcome)
		if err != nil {
			t.Fatalf("reconcileConfiguration: %v", err)
		}
		return false, res.RequeueAfter
	}
	var stalledAt int32
	for i := 1; stalledAt == 0; i++ {
		if i > 10 {
			t.Fatalf("not stalled after %d attempts over %s: %+v", i-1, now.Sub(t0), ws.Status.Conditions)
		}
		done, after := attempt()
		if done {
			t.Fatal("a failing configuration reported done")
		}
		ready := apimeta.FindStatusCondition(ws.Status.Conditions, autov1alpha1.WorkspaceReady)
		if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != autov1alpha1.WorkspaceReasonConfigurationFailed ||
			!strings.Contains(ready.Message, "configure stack b: "+lockErr) || !strings.Contains(ready.Message, "failed attempts since 2026-12-01T12:00:00Z") {
			t.Fatalf("attempt %d: Ready = %+v", i, ready)
		}
		if f := ws.Status.ConfigurationFailure; f == nil || f.Attempts != int32(i) || !f.Since.Time.Equal(t0) || f.Generation != 3 {
			t.Fatalf("attempt %d: status.configurationFailure = %+v", i, f)
		}
		if after <= 0 {
			t.Fatalf("attempt %d: no retry", i)
		}
		if stalled := apimeta.FindStatusCondition(ws.Status.Conditions, autov1alpha1.WorkspaceStalled); stalled != nil {
			if stalled.Reason != autov1alpha1.WorkspaceReasonConfigurationFailed || stalled.Message != ready.Message {
				t.Fatalf("Stalled = %+v, want the Ready reason and message", stalled)
			}
			stalledAt = int32(i)
		}
		now = now.Add(after)
	}
	// 5 s, 10 s, 20 s, 40 s, 80 s: the sixth attempt, 155 s in, is the first
	// past both thresholds.
	if stalledAt != 6 {
		t.Fatalf("stalled at attempt %d, want 6", stalledAt)
	}

	// An update running is no failure: the count waits.
	agent.err["b"] = status.Error(codes.FailedPrecondition, "stack b is busy with update b-2; configuration is applied after it")
	if done, after := attempt(); done || after != configureWaitRetry {
		t.Fatalf("while an update runs: done %v, retry after %s", done, after)
	}
	if ready := apimeta.FindStatusCondition(ws.Status.Conditions, autov1alpha1.WorkspaceReady); ready.Reason != autov1alpha1.WorkspaceReasonInitializing ||
		!strings.Contains(ready.Message, "waiting to configure stack b: stack b is busy") {
		t.Fatalf("while an update runs: Ready = %+v", ready)
	}
	if f := ws.Status.ConfigurationFailure; f == nil || f.Attempts != 6 {
		t.Fatalf("while an update runs: status.configurationFailure = %+v", f)
	}

	// The lock goes: configured, and nothing of the failure is left.
	delete(agent.err, "b")
	if done, _ := attempt(); !done {
		t.Fatalf("the configuration applied but not done: %+v", ws.Status.Conditions)
	}
	if ws.Status.ConfigurationFailure != nil {
		t.Fatalf("status.configurationFailure = %+v after a success", ws.Status.ConfigurationFailure)
	}
}
