package agent

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

// grpcMessageLimit is gRPC's default limit on a message received (the
// operator's agent client keeps it).
const grpcMessageLimit = 4 << 20

// serveForTest serves s on loopback without authentication and returns a
// client with gRPC's default options.
func serveForTest(t *testing.T, s *Server) agentv1.AgentClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	agentv1.RegisterAgentServer(gs, s)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return agentv1.NewAgentClient(conn)
}

// TestWatchOperationSurvivesHugeOutput: a run whose engine output holds a
// 6 MiB line without a newline, whose step names a 6 MiB URN, and whose
// result carries 6 MiB of outputs and 6 MiB of changed resources streams
// every event and its result through WatchOperation (each under gRPC's 4 MiB
// limit, which the old agent broke the stream with), and GetOperation
// answers; the output that did not fit is named in a notice, the others kept.
func TestWatchOperationSurvivesHugeOutput(t *testing.T) {
	const huge = 6 << 20
	s := newServer(logr.Discard(), newRedactor(), RunRetention{})
	s.configKeys["dev"] = map[string]bool{}
	var changed []string
	for i := 0; len(changed)*200 < huge; i++ {
		changed = append(changed, fmt.Sprintf("create urn:pulumi:dev::p::stackflowtest:index:Record::r%0190d", i))
	}
	s.runner = func(_ context.Context, log logr.Logger, r *run, _ *agentv1.StartOperationRequest) *agentv1.Operation {
		out := newEventWriter(r, log, s.redact)
		for range huge / (64 << 10) {
			_, _ = out.Write([]byte(strings.Repeat("z", 64<<10)))
		}
		_, _ = out.Write([]byte("\nafter the long line\n"))
		out.Flush()
		r.emit(&agentv1.OperationEvent{Event: &agentv1.OperationEvent_Step{Step: "create urn:pulumi:dev::p::t::" + strings.Repeat("n", huge)}})
		r.emit(&agentv1.OperationEvent{Event: &agentv1.OperationEvent_Log{Log: strings.Repeat("l", huge)}})
		return &agentv1.Operation{
			State: agentv1.OperationState_OPERATION_STATE_SUCCEEDED, Message: "up succeeded",
			Outputs: map[string]*agentv1.Output{
				"big":   {ValueJson: `"` + strings.Repeat("b", huge) + `"`},
				"small": {ValueJson: `"ok"`},
			},
			ChangedResources: changed,
		}
	}
	c := serveForTest(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.StartOperation(ctx, &agentv1.StartOperationRequest{UpdateId: "u1", StackName: "dev", Type: agentv1.OperationType_OPERATION_TYPE_UP}); err != nil {
		t.Fatal(err)
	}
	stream, err := c.WatchOperation(ctx, &agentv1.GetOperationRequest{UpdateId: "u1"})
	if err != nil {
		t.Fatal(err)
	}
	var logs, steps []string
	var result *agentv1.Operation
	for result == nil {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("the stream broke after %d log lines and %d steps: %v", len(logs), len(steps), err)
		}
		if size := proto.Size(ev); size > maxEventBytes {
			t.Fatalf("an event of %d bytes, over the cap of %d", size, maxEventBytes)
		}
		switch {
		case ev.GetLog() != "":
			logs = append(logs, ev.GetLog())
		case ev.GetStep() != "":
			steps = append(steps, ev.GetStep())
		default:
			result = ev.GetResult()
		}
	}
	if len(logs) != 3 || !strings.HasSuffix(logs[0], cutMark) || logs[1] != "after the long line" || !strings.HasPrefix(logs[2], "llll") ||
		len(steps) != 1 || !strings.HasPrefix(steps[0], "create urn:pulumi:dev::p::t::nnnn") {
		t.Fatalf("streamed log lines %s and steps %s", abbreviate(logs), abbreviate(steps))
	}
	if result.GetState() != agentv1.OperationState_OPERATION_STATE_SUCCEEDED {
		t.Fatalf("result %v: %s", result.GetState(), result.GetMessage())
	}
	if _, ok := result.GetOutputs()["big"]; ok || result.GetOutputs()["small"].GetValueJson() != `"ok"` {
		t.Fatalf("outputs %v: want small kept, big left out", slices.Collect(mapKeys(result.GetOutputs())))
	}
	notices := strings.Join(result.GetNotices(), "; ")
	if !strings.Contains(notices, "output big") || !strings.Contains(notices, "changed resources") {
		t.Fatalf("notices %q: want the output left out and the changed resources cut named", notices)
	}
	if n := len(result.GetChangedResources()); n == 0 || n >= len(changed) || !slices.Equal(result.GetChangedResources(), changed[:n]) {
		t.Fatalf("%d of %d changed resources reported, want the first ones that fit", n, len(changed))
	}
	t.Logf("result of %d bytes: %d changed resources of %d, notices: %s", proto.Size(result), len(result.GetChangedResources()), len(changed), notices)
	got, err := c.GetOperation(ctx, &agentv1.GetOperationRequest{UpdateId: "u1"})
	if err != nil || !proto.Equal(got, result) {
		t.Fatalf("GetOperation = %v bytes, %v; want the streamed result", proto.Size(got), err)
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestRunEventsStayBounded: the events a run keeps for late watchers are
// bounded in bytes as well as in number: a run printing ten thousand lines
// of 64 KiB (640 MiB; the old agent kept 2000 of them, 128 MiB, per run, for
// each of up to 50 finished runs) keeps at most maxBufferedEventBytes (and
// always its last event).
func TestRunEventsStayBounded(t *testing.T) {
	r := &run{notify: make(chan struct{}), done: make(chan struct{})}
	line := strings.Repeat("p", 64<<10)
	for i := range 10000 {
		r.emit(&agentv1.OperationEvent{Event: &agentv1.OperationEvent_Log{Log: fmt.Sprintf("%05d %s", i, line)}})
	}
	held := 0
	for _, ev := range r.events {
		held += proto.Size(ev)
	}
	last := r.events[len(r.events)-1].GetLog()
	t.Logf("the run keeps %d events, %d bytes, %d dropped", len(r.events), held, r.dropped)
	if held > maxBufferedEventBytes || !strings.HasPrefix(last, "09999 ") || r.dropped+len(r.events) != 10000 {
		t.Fatalf("the run keeps %d events of %d bytes in all (%d dropped), the last %.6q; want at most %d bytes, ending with the last event",
			len(r.events), held, r.dropped, last, maxBufferedEventBytes)
	}
}

// TestWatchOperationSurvivesBinaryOutput: a program printing bytes that are
// not UTF-8 (a Latin-1 message, a binary file) and an error message holding
// some stream and report as U+FFFD; protobuf refuses to send a string that is
// not UTF-8, which ended the old agent's stream and failed its GetOperation.
func TestWatchOperationSurvivesBinaryOutput(t *testing.T) {
	s := newServer(logr.Discard(), newRedactor(), RunRetention{})
	s.configKeys["dev"] = map[string]bool{}
	s.runner = func(_ context.Context, log logr.Logger, r *run, _ *agentv1.StartOperationRequest) *agentv1.Operation {
		out := newEventWriter(r, log, s.redact)
		_, _ = out.Write([]byte("caf\xe9 au lait\n\x00\xff\xfe binary\n"))
		out.Flush()
		return &agentv1.Operation{State: agentv1.OperationState_OPERATION_STATE_FAILED, Message: "provider said: caf\xe9"}
	}
	c := serveForTest(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.StartOperation(ctx, &agentv1.StartOperationRequest{UpdateId: "u1", StackName: "dev", Type: agentv1.OperationType_OPERATION_TYPE_UP}); err != nil {
		t.Fatal(err)
	}
	stream, err := c.WatchOperation(ctx, &agentv1.GetOperationRequest{UpdateId: "u1"})
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("the stream broke after %q: %v", logs, err)
		}
		if ev.GetResult() != nil {
			if got := ev.GetResult().GetMessage(); got != "provider said: caf\uFFFD" {
				t.Fatalf("result message %q", got)
			}
			break
		}
		logs = append(logs, ev.GetLog())
	}
	if want := []string{"caf\uFFFD au lait", "\x00\uFFFD binary"}; !slices.Equal(logs, want) {
		t.Fatalf("streamed %q, want %q", logs, want)
	}
	if _, err := c.GetOperation(ctx, &agentv1.GetOperationRequest{UpdateId: "u1"}); err != nil {
		t.Fatalf("GetOperation: %v", err)
	}
}

// TestCapOperation: what an operation's result keeps when it is over the
// limit.
func TestCapOperation(t *testing.T) {
	out := func(n int) *agentv1.Output { return &agentv1.Output{ValueJson: `"` + strings.Repeat("v", n) + `"`} }
	resources := func(n int) []string {
		var r []string
		for i := range n {
			r = append(r, fmt.Sprintf("create urn:pulumi:dev::p::t::r%04d", i))
		}
		return r
	}
	manyOutputs := map[string]*agentv1.Output{}
	for i := range 30 {
		manyOutputs[fmt.Sprintf("o%02d", i)] = out(20 << 10)
	}
	// Budget: the limit less 8 KiB for the notices; a changed resource
	// takes 36 bytes.
	const limit = 64 << 10
	tests := []struct {
		name          string
		op            *agentv1.Operation
		wantOutputs   []string
		wantResources int
		wantNotices   []string
	}{
		{
			name:          "within the limit: all kept",
			op:            &agentv1.Operation{Outputs: map[string]*agentv1.Output{"a": out(10)}, ChangedResources: resources(3)},
			wantOutputs:   []string{"a"},
			wantResources: 3,
		},
		{
			name:          "outputs over: the largest left out, the others kept",
			op:            &agentv1.Operation{Outputs: map[string]*agentv1.Output{"big": out(100 << 10), "mid": out(30 << 10), "small": out(10)}, ChangedResources: resources(3)},
			wantOutputs:   []string{"mid", "small"},
			wantResources: 3,
			wantNotices:   []string{"1 stack output(s) not reported, too large for the agent's 65536-byte result: output big (read them with pulumi stack output)"},
		},
		{
			name:          "changed resources over: cut from the end, outputs kept",
			op:            &agentv1.Operation{Outputs: map[string]*agentv1.Output{"mid": out(30 << 10)}, ChangedResources: resources(2000)},
			wantOutputs:   []string{"mid"},
			wantResources: 739,
			wantNotices:   []string{"739 of 2000 changed resources listed, for the agent's 65536-byte result"},
		},
		{
			name:          "both over: outputs left out only down to 100 changed resources, which then fill the room",
			op:            &agentv1.Operation{Outputs: map[string]*agentv1.Output{"big": out(60 << 10), "small": out(10)}, ChangedResources: resources(2000)},
			wantOutputs:   []string{"small"},
			wantResources: 1592,
			wantNotices: []string{"1 stack output(s) not reported, too large for the agent's 65536-byte result: output big (read them with pulumi stack output)",
				"1592 of 2000 changed resources listed, for the agent's 65536-byte result"},
		},
		{
			name:          "many outputs: ten named",
			op:            &agentv1.Operation{Outputs: manyOutputs},
			wantOutputs:   []string{"o28", "o29"},
			wantResources: 0,
			wantNotices: []string{"28 stack output(s) not reported, too large for the agent's 65536-byte result: " +
				"output o00, output o01, output o02, output o03, output o04, output o05, output o06, output o07, output o08, output o09 and 18 more (read them with pulumi stack output)"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.op.GetOutputs() {
				without := proto.Clone(tc.op).(*agentv1.Operation)
				delete(without.Outputs, k)
				if got, want := outputEntrySize(k, v), proto.Size(tc.op)-proto.Size(without); got != want {
					t.Fatalf("outputEntrySize(%s) = %d, want %d", k, got, want)
				}
			}
			capOperation(tc.op, limit, func(s string) string { return s })
			if size := proto.Size(tc.op); size > limit {
				t.Fatalf("%d bytes", size)
			}
			got := slices.Sorted(mapKeys(tc.op.GetOutputs()))
			if !slices.Equal(got, tc.wantOutputs) || !slices.Equal(tc.op.GetNotices(), tc.wantNotices) {
				t.Fatalf("outputs %v, notices %q; want %v, %q", got, tc.op.GetNotices(), tc.wantOutputs, tc.wantNotices)
			}
			if n := len(tc.op.GetChangedResources()); n != tc.wantResources {
				t.Fatalf("%d changed resources, want %d", n, tc.wantResources)
			}
		})
	}
}
