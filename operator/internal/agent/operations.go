package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/debug"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optrefresh"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/stackflow-io/stackflow/operator/internal/plan"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

// run is one operation and everything watchers need.
type run struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	op     *agentv1.Operation
	events []*agentv1.OperationEvent
	// eventBytes is the size of events, in the protocol.
	eventBytes int
	// dropped counts events evicted from the front of the buffer.
	dropped int
	notify  chan struct{} // closed and replaced on every new event
}

func (r *run) snapshot() *agentv1.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return proto.Clone(r.op).(*agentv1.Operation)
}

// emit records an event, cut to fit a message (capEventText), for watchers;
// beyond maxBufferedEvents or maxBufferedEventBytes the oldest are dropped.
func (r *run) emit(ev *agentv1.OperationEvent) {
	capEventText(ev)
	size := proto.Size(ev)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
	r.eventBytes += size
	for len(r.events) > 1 && (len(r.events) > maxBufferedEvents || r.eventBytes > maxBufferedEventBytes) {
		r.eventBytes -= proto.Size(r.events[0])
		r.events[0] = nil // the backing array would hold it until it grows
		r.events = r.events[1:]
		r.dropped++
	}
	close(r.notify)
	r.notify = make(chan struct{})
}

// StartOperation starts an operation, or reports the existing run with that ID.
func (s *Server) StartOperation(_ context.Context, req *agentv1.StartOperationRequest) (*agentv1.Operation, error) {
	if req.GetUpdateId() == "" || req.GetStackName() == "" {
		return nil, status.Error(codes.InvalidArgument, "update ID and stack name are required")
	}
	if req.GetType() == agentv1.OperationType_OPERATION_TYPE_UNSPECIFIED {
		return nil, status.Error(codes.InvalidArgument, "operation type is required: preview, up, refresh or destroy")
	}
	s.pruneRuns()
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.runs[req.GetUpdateId()]; ok {
		return r.snapshot(), nil
	}
	if err := s.checkingOut(); err != nil {
		return nil, err
	}
	if want := req.GetRevision(); want != "" && want != s.program.revision {
		return nil, status.Errorf(codes.FailedPrecondition, "the workspace is at revision %s, not %s (the update's): waiting for it to check out %s", s.program.revision, want, want)
	}
	if _, configured := s.configKeys[req.GetStackName()]; !configured {
		// An agent that restarted has lost the configuration the operator
		// set; running now would deploy without it.
		return nil, status.Errorf(codes.FailedPrecondition, "stack %s is not configured in this workspace yet (SelectStack first)", req.GetStackName())
	}
	if _, selecting := s.selections[req.GetStackName()]; selecting {
		// Its configuration is being replaced: the update would run with
		// part of it.
		return nil, status.Errorf(codes.FailedPrecondition, "stack %s is being configured; the update starts after it", req.GetStackName())
	}
	now := s.now()
	op := &agentv1.Operation{
		UpdateId: req.GetUpdateId(), Type: req.GetType(), StackName: req.GetStackName(),
		State: agentv1.OperationState_OPERATION_STATE_RUNNING, StartTimeUnixNano: now.UnixNano(),
		Revision: s.program.revision,
	}
	if other, busy := s.busy[req.GetStackName()]; busy {
		// Another operation of this workspace holds the stack: a conflict the
		// caller retries, never queued behind it silently.
		op.State = agentv1.OperationState_OPERATION_STATE_CONFLICT
		op.Message = fmt.Sprintf("stack %s is busy with update %s", req.GetStackName(), other)
		op.EndTimeUnixNano = now.UnixNano()
		return op, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{cancel: cancel, done: make(chan struct{}), op: op, notify: make(chan struct{})}
	s.runs[req.GetUpdateId()] = r
	s.busy[req.GetStackName()] = req.GetUpdateId()
	go s.execute(ctx, r, proto.Clone(req).(*agentv1.StartOperationRequest))
	return r.snapshot(), nil
}

// GetOperation reports a run's state; UNKNOWN when this agent never ran it.
func (s *Server) GetOperation(_ context.Context, req *agentv1.GetOperationRequest) (*agentv1.Operation, error) {
	s.mu.Lock()
	r, ok := s.runs[req.GetUpdateId()]
	s.mu.Unlock()
	if !ok {
		return &agentv1.Operation{UpdateId: req.GetUpdateId(), State: agentv1.OperationState_OPERATION_STATE_UNKNOWN}, nil
	}
	return r.snapshot(), nil
}

// WatchOperation streams a run's events and ends with its result.
func (s *Server) WatchOperation(req *agentv1.GetOperationRequest, stream agentv1.Agent_WatchOperationServer) error {
	s.mu.Lock()
	r, ok := s.runs[req.GetUpdateId()]
	s.mu.Unlock()
	if !ok {
		return status.Errorf(codes.NotFound, "no run with update ID %s in this workspace", req.GetUpdateId())
	}
	next := 0 // index in the run's event history (including dropped ones)
	for {
		r.mu.Lock()
		start := next - r.dropped
		if start < 0 {
			start = 0
		}
		pending := append([]*agentv1.OperationEvent(nil), r.events[start:]...)
		next = r.dropped + len(r.events)
		notify := r.notify
		r.mu.Unlock()
		for _, ev := range pending {
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
		select {
		case <-r.done:
			// Drain what arrived since, then the result.
			r.mu.Lock()
			start := next - r.dropped
			if start < 0 {
				start = 0
			}
			pending := append([]*agentv1.OperationEvent(nil), r.events[start:]...)
			r.mu.Unlock()
			for _, ev := range pending {
				if err := stream.Send(ev); err != nil {
					return err
				}
			}
			return stream.Send(&agentv1.OperationEvent{Event: &agentv1.OperationEvent_Result{Result: r.snapshot()}})
		case <-notify:
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

// CancelOperation stops a running operation.
func (s *Server) CancelOperation(_ context.Context, req *agentv1.GetOperationRequest) (*agentv1.Operation, error) {
	s.mu.Lock()
	r, ok := s.runs[req.GetUpdateId()]
	s.mu.Unlock()
	if !ok {
		return &agentv1.Operation{UpdateId: req.GetUpdateId(), State: agentv1.OperationState_OPERATION_STATE_UNKNOWN}, nil
	}
	r.cancel()
	<-r.done
	return r.snapshot(), nil
}

// execute runs the operation and records its result.
func (s *Server) execute(ctx context.Context, r *run, req *agentv1.StartOperationRequest) {
	log := s.log.WithValues("update", req.GetUpdateId(), "stack", req.GetStackName(), "type", typeName(req.GetType()))
	log.Info("Starting operation")
	result := s.runner(ctx, log, r, req)
	s.mu.Lock()
	delete(s.busy, req.GetStackName())
	s.mu.Unlock()
	r.mu.Lock()
	result.UpdateId, result.Type, result.StackName = r.op.UpdateId, r.op.Type, r.op.StackName
	result.StartTimeUnixNano, result.Revision = r.op.StartTimeUnixNano, r.op.Revision
	result.EndTimeUnixNano = s.now().UnixNano()
	result.Notices = append(r.op.Notices, result.Notices...)
	result.Message = s.redact.redact(result.Message)
	for i, n := range result.Notices {
		result.Notices[i] = s.redact.redact(n)
	}
	capOperation(result, maxEventBytes-16, s.redact.redact) // the result event wraps it
	r.op = result
	r.mu.Unlock()
	close(r.done)
	log.Info("Operation ended", "state", result.State.String(), "message", result.Message)
	s.pruneRuns()
}

// runWithRecovery runs the operation; when the stack is locked by a run of this
// workspace that no longer exists (the agent or its pod was killed mid-update),
// it removes the stale lock and the pending operations and runs again, once.
func (s *Server) runWithRecovery(ctx context.Context, log logr.Logger, r *run, req *agentv1.StartOperationRequest) *agentv1.Operation {
	s.mu.Lock()
	stack := s.stacks[req.GetStackName()] // StartOperation checked it was selected
	s.mu.Unlock()
	for attempt := 0; ; attempt++ {
		res := s.runOnce(ctx, r, stack, req)
		if res.State != agentv1.OperationState_OPERATION_STATE_CONFLICT || attempt > 0 {
			return res
		}
		stale, holders := staleLock(res.Message, s.hostname, s.alive)
		if !stale {
			return res
		}
		notice := fmt.Sprintf("removed a stale lock on stack %s left by a killed run (%s@%s pid %d)", req.GetStackName(), holders[0].User, holders[0].Host, holders[0].PID)
		log.Info("Recovering stale stack lock", "holders", len(holders))
		if err := stack.Cancel(ctx); err != nil {
			res.Message += "; removing the stale lock failed: " + s.redact.summarize(err)
			return res
		}
		cleared, err := clearPendingOperations(ctx, stack)
		if err != nil {
			res.Message += "; " + err.Error()
			return res
		}
		if len(cleared) > 0 {
			notice += fmt.Sprintf("; cleared %d pending operation(s) of the interrupted update (their resources may exist outside the state until a refresh): %s", len(cleared), strings.Join(cleared, ", "))
		}
		r.mu.Lock()
		r.op.Notices = append(r.op.Notices, notice)
		r.mu.Unlock()
		r.emit(&agentv1.OperationEvent{Event: &agentv1.OperationEvent_Log{Log: notice}})
	}
}

// runOnce runs the Pulumi operation once, streaming its output.
func (s *Server) runOnce(ctx context.Context, r *run, stack auto.Stack, req *agentv1.StartOperationRequest) *agentv1.Operation {
	out := newEventWriter(r, s.log.WithValues("update", req.GetUpdateId()), s.redact)
	defer out.Flush()
	engineEvents := make(chan events.EngineEvent)
	stepsDone, quit := make(chan struct{}), make(chan struct{})
	var changedMu sync.Mutex
	changed := map[string]bool{} // resources changed by the run, from engine events
	go func() {
		defer close(stepsDone)
		for {
			select {
			case ev, ok := <-engineEvents:
				if !ok {
					return
				}
				if ev.ResOutputsEvent != nil {
					m := ev.ResOutputsEvent.Metadata
					r.emit(&agentv1.OperationEvent{Event: &agentv1.OperationEvent_Step{Step: string(m.Op) + " " + m.URN}})
				}
				if ev.ResourcePreEvent != nil {
					m := ev.ResourcePreEvent.Metadata
					switch string(m.Op) {
					case "same", "read", "refresh":
					default:
						if m.Type != "pulumi:pulumi:Stack" {
							changedMu.Lock()
							changed[string(m.Op)+" "+m.URN] = true
							changedMu.Unlock()
						}
					}
				}
			case <-quit:
				return
			}
		}
	}()
	// The Automation API closes engineEvents when the CLI's event stream ends;
	// a CLI that failed before opening it (a locked stack) never does.
	defer func() {
		select {
		case <-stepsDone:
		case <-time.After(5 * time.Second):
		}
		close(quit)
	}()

	oomBefore, oomOK := oomKills()
	res := &agentv1.Operation{}
	var err error
	var changes map[string]int
	var permalink string
	var outputs auto.OutputMap
	switch req.GetType() {
	case agentv1.OperationType_OPERATION_TYPE_UP:
		opts := []optup.Option{optup.ProgressStreams(out), optup.EventStreams(engineEvents), optup.SuppressProgress()}
		opts = append(opts, upOptions(req)...)
		if len(req.GetPlan()) > 0 {
			path, cleanup, perr := planFile(req.GetPlan())
			if perr != nil {
				return &agentv1.Operation{State: agentv1.OperationState_OPERATION_STATE_FAILED, Message: perr.Error()}
			}
			defer cleanup()
			opts = append(opts, optup.Plan(path))
		}
		if s.logLevel > 0 {
			opts = append(opts, optup.DebugLogging(s.debugLogging()))
		}
		var ur auto.UpResult
		ur, err = stack.Up(ctx, opts...)
		if ur.Summary.ResourceChanges != nil {
			changes = *ur.Summary.ResourceChanges
		}
		permalink, _ = ur.GetPermalink()
		outputs = ur.Outputs
	case agentv1.OperationType_OPERATION_TYPE_PREVIEW:
		opts := []optpreview.Option{optpreview.ProgressStreams(out), optpreview.EventStreams(engineEvents), optpreview.SuppressProgress()}
		opts = append(opts, previewOptions(req)...)
		if s.logLevel > 0 {
			opts = append(opts, optpreview.DebugLogging(s.debugLogging()))
		}
		var planPath string
		if req.GetSavePlan() {
			path, cleanup, perr := planFile(nil)
			if perr != nil {
				return &agentv1.Operation{State: agentv1.OperationState_OPERATION_STATE_FAILED, Message: perr.Error()}
			}
			defer cleanup()
			planPath = path
			opts = append(opts, optpreview.Plan(path))
		}
		var pr auto.PreviewResult
		pr, err = stack.Preview(ctx, opts...)
		if err == nil && planPath != "" {
			res.Plan, err = readPlan(planPath)
		}
		changes = map[string]int{}
		for k, v := range pr.ChangeSummary {
			changes[string(k)] = v
		}
		permalink, _ = pr.GetPermalink()
	case agentv1.OperationType_OPERATION_TYPE_REFRESH:
		opts := []optrefresh.Option{optrefresh.ProgressStreams(out), optrefresh.EventStreams(engineEvents), optrefresh.SuppressProgress()}
		opts = append(opts, refreshOptions(req)...)
		if s.logLevel > 0 {
			opts = append(opts, optrefresh.DebugLogging(s.debugLogging()))
		}
		var rr auto.RefreshResult
		rr, err = stack.Refresh(ctx, opts...)
		if rr.Summary.ResourceChanges != nil {
			changes = *rr.Summary.ResourceChanges
		}
		permalink, _ = rr.GetPermalink()
	case agentv1.OperationType_OPERATION_TYPE_DESTROY:
		opts := []optdestroy.Option{optdestroy.ProgressStreams(out), optdestroy.EventStreams(engineEvents), optdestroy.SuppressProgress()}
		opts = append(opts, destroyOptions(req)...)
		if s.logLevel > 0 {
			opts = append(opts, optdestroy.DebugLogging(s.debugLogging()))
		}
		var dr auto.DestroyResult
		dr, err = stack.Destroy(ctx, opts...)
		if dr.Summary.ResourceChanges != nil {
			changes = *dr.Summary.ResourceChanges
		}
		permalink, _ = dr.GetPermalink()
	default:
		return &agentv1.Operation{State: agentv1.OperationState_OPERATION_STATE_FAILED, Message: fmt.Sprintf("unknown operation type %v", req.GetType())}
	}
	res.Permalink = permalink
	select { // the event stream has ended with the run, or soon after
	case <-stepsDone:
	case <-time.After(5 * time.Second):
	}
	changedMu.Lock()
	for k := range changed {
		res.ChangedResources = append(res.ChangedResources, k)
	}
	changedMu.Unlock()
	sort.Strings(res.ChangedResources)
	if len(changes) > 0 {
		res.Changes = map[string]int64{}
		for k, v := range changes {
			res.Changes[k] = int64(v)
		}
	}
	switch {
	case err == nil:
		res.State = agentv1.OperationState_OPERATION_STATE_SUCCEEDED
		res.Message = typeName(req.GetType()) + " succeeded"
	case ctx.Err() != nil:
		res.State = agentv1.OperationState_OPERATION_STATE_CANCELED
		res.Message = typeName(req.GetType()) + " canceled"
		return res
	case auto.IsConcurrentUpdateError(err):
		res.State = agentv1.OperationState_OPERATION_STATE_CONFLICT
		res.Message = conflictMessage(err)
		return res
	default:
		res.State = agentv1.OperationState_OPERATION_STATE_FAILED
		res.Message = oomMessage(oomBefore, oomOK, s.redact.summarize(err))
		if len(req.GetPlan()) > 0 {
			if resource, detail, ok := plan.Violation(err.Error()); ok {
				if resource != "" {
					detail = resource + ": " + detail
				}
				res.PlanViolation = s.redact.redact(detail)
			}
		}
	}
	if req.GetType() == agentv1.OperationType_OPERATION_TYPE_REFRESH {
		outputs, _ = stack.Outputs(context.Background())
	}
	if outputs != nil {
		res.Outputs = map[string]*agentv1.Output{}
		var secretOutputs []string
		for k, v := range outputs {
			b, merr := json.Marshal(v.Value)
			if merr != nil {
				continue
			}
			// An output the engine does not know as secret may still hold a
			// value the agent redacts (a provider returning an environment
			// variable it read): it is reported as secret, not in clear.
			secret := v.Secret || s.redact.redact(string(b)) != string(b)
			res.Outputs[k] = &agentv1.Output{ValueJson: string(b), Secret: secret}
			if v.Secret {
				secretOutputs = append(secretOutputs, secretLeaves(v.Value)...)
			}
		}
		// The stack's current outputs replace those of its last run.
		s.redact.replace(outputsScope(req.GetStackName()), secretOutputs...)
	}
	return res
}

// debugLogging turns on the engine's verbose logs (pulumi -v=N, written to the
// engine's log files, not to the streamed output: they may hold provider
// inputs verbatim).
func (s *Server) debugLogging() debug.LoggingOptions {
	level := s.logLevel
	return debug.LoggingOptions{LogLevel: &level, FlowToPlugins: true}
}

// conflictMessage keeps the lock holders from a "stack is locked" error, which
// staleLock reads, and drops the CLI's other output.
func conflictMessage(err error) string {
	text := err.Error()
	if i := strings.Index(text, "the stack is currently locked by"); i >= 0 {
		msg := text[i:]
		var keep []string
		for _, line := range strings.Split(msg, "\n") {
			l := strings.TrimSpace(line)
			if l == "" || strings.HasPrefix(l, "code:") || strings.HasPrefix(l, "stdout:") || strings.HasPrefix(l, "stderr:") {
				break
			}
			keep = append(keep, l)
		}
		return strings.Join(keep, "\n")
	}
	return "another update is in progress on this stack: " + summarize(err)
}

func typeName(t agentv1.OperationType) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "OPERATION_TYPE_"))
}

func upOptions(req *agentv1.StartOperationRequest) []optup.Option {
	var o []optup.Option
	if req.GetParallel() > 0 {
		o = append(o, optup.Parallel(int(req.GetParallel())))
	}
	if req.GetMessage() != "" {
		o = append(o, optup.Message(req.GetMessage()))
	}
	if req.GetExpectNoChanges() {
		o = append(o, optup.ExpectNoChanges())
	}
	if len(req.GetReplace()) > 0 {
		o = append(o, optup.Replace(req.GetReplace()))
	}
	if len(req.GetTarget()) > 0 {
		o = append(o, optup.Target(req.GetTarget()))
	}
	if req.GetTargetDependents() {
		o = append(o, optup.TargetDependents())
	}
	if req.GetRefresh() {
		o = append(o, optup.Refresh())
	}
	if req.GetContinueOnError() {
		o = append(o, optup.ContinueOnError())
	}
	return o
}

func previewOptions(req *agentv1.StartOperationRequest) []optpreview.Option {
	var o []optpreview.Option
	if req.GetParallel() > 0 {
		o = append(o, optpreview.Parallel(int(req.GetParallel())))
	}
	if req.GetMessage() != "" {
		o = append(o, optpreview.Message(req.GetMessage()))
	}
	if req.GetExpectNoChanges() {
		o = append(o, optpreview.ExpectNoChanges())
	}
	if len(req.GetReplace()) > 0 {
		o = append(o, optpreview.Replace(req.GetReplace()))
	}
	if len(req.GetTarget()) > 0 {
		o = append(o, optpreview.Target(req.GetTarget()))
	}
	if req.GetTargetDependents() {
		o = append(o, optpreview.TargetDependents())
	}
	if req.GetRefresh() {
		o = append(o, optpreview.Refresh())
	}
	return o
}

func refreshOptions(req *agentv1.StartOperationRequest) []optrefresh.Option {
	var o []optrefresh.Option
	if req.GetParallel() > 0 {
		o = append(o, optrefresh.Parallel(int(req.GetParallel())))
	}
	if req.GetMessage() != "" {
		o = append(o, optrefresh.Message(req.GetMessage()))
	}
	if req.GetExpectNoChanges() {
		o = append(o, optrefresh.ExpectNoChanges())
	}
	if len(req.GetTarget()) > 0 {
		o = append(o, optrefresh.Target(req.GetTarget()))
	}
	if req.GetRunProgram() {
		o = append(o, optrefresh.RunProgram(true))
	}
	return o
}

func destroyOptions(req *agentv1.StartOperationRequest) []optdestroy.Option {
	var o []optdestroy.Option
	if req.GetParallel() > 0 {
		o = append(o, optdestroy.Parallel(int(req.GetParallel())))
	}
	if req.GetMessage() != "" {
		o = append(o, optdestroy.Message(req.GetMessage()))
	}
	if len(req.GetTarget()) > 0 {
		o = append(o, optdestroy.Target(req.GetTarget()))
	}
	if req.GetTargetDependents() {
		o = append(o, optdestroy.TargetDependents())
	}
	if req.GetRefresh() {
		o = append(o, optdestroy.Refresh())
	}
	if req.GetContinueOnError() {
		o = append(o, optdestroy.ContinueOnError())
	}
	if req.GetRemove() {
		o = append(o, optdestroy.Remove())
	}
	if req.GetRunProgram() {
		o = append(o, optdestroy.RunProgram(true))
	}
	return o
}

// planFile makes a private file for an update plan (holding data, when
// given) and a func that removes it: the engine reads and writes plans by
// path. Plans hold encrypted secrets only, but are still kept to the agent.
func planFile(data []byte) (string, func(), error) {
	dir, err := os.MkdirTemp("", "stackflow-plan-")
	if err != nil {
		return "", nil, fmt.Errorf("make room for the update plan: %w", err)
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	path := filepath.Join(dir, "plan.json")
	if data != nil {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			cleanup()
			return "", nil, fmt.Errorf("write the update plan: %w", err)
		}
	}
	return path, cleanup, nil
}

// readPlan reads the plan a preview saved, refusing one larger than the
// operator keeps (plan.MaxBytes).
func readPlan(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("the preview saved no update plan: %w", err)
	}
	if fi.Size() > plan.MaxBytes {
		return nil, fmt.Errorf("the update plan is %d bytes, more than the %d Stackflow keeps: split the stack, or target fewer resources", fi.Size(), plan.MaxBytes)
	}
	return os.ReadFile(path)
}
