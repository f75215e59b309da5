package controller

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/agentclient"
	"github.com/stackflow-io/stackflow/operator/internal/workspace"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

// The per-step tier: the Workspace and Update reconcilers driven one
// Reconcile at a time against the controller-runtime fake client (with
// status subresources, resourceVersions and optimistic locking) and an
// in-process agent served over bufconn through the real gRPC client pool,
// asserting after each step the stored status, the events, and that kstatus
// reads the conditions as they mean (kstatusConforms).

// stepEnv is one per-step test's API server, agent and clock.
type stepEnv struct {
	c      client.Client
	events *record.FakeRecorder
	agent  *fakeAgent
	pool   *agentclient.Pool
	now    time.Time
}

func newStepEnv(t *testing.T, objs ...client.Object) *stepEnv {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, autov1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	e := &stepEnv{
		c: fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&autov1alpha1.Workspace{}, &autov1alpha1.Update{}).
			WithObjects(objs...).Build(),
		events: record.NewFakeRecorder(100),
		agent:  newFakeAgent(),
		now:    time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC),
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	agentv1.RegisterAgentServer(gs, e.agent)
	go func() { _ = gs.Serve(lis) }()
	e.pool = agentclient.NewPool().WithDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })
	t.Cleanup(func() {
		e.pool.Close()
		gs.Stop()
	})
	return e
}

func (e *stepEnv) clock() time.Time { return e.now }

// reconcile runs one Reconcile of obj's key and reads obj back (left as it
// was when the object is gone).
func (e *stepEnv) reconcile(t *testing.T, r interface {
	Reconcile(context.Context, ctrl.Request) (ctrl.Result, error)
}, obj client.Object) ctrl.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	return res
}

// drainEvents returns the events recorded since the last call.
func (e *stepEnv) drainEvents() []string { return recordedEvents(e.events) }

// recordedEvents empties rec, returning the events it recorded since it was
// last emptied.
func recordedEvents(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case ev := <-rec.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

// kstatusConforms fails the test unless kstatus, reading the stored object
// as Argo CD, Flux and kubectl-style tools do, agrees with its conditions:
// Failed while Stalled, InProgress while Reconciling or not Ready, Current
// when Ready — and Current only with status.observedGeneration equal to
// metadata.generation. Ready must be there: every kind with conditions
// (Workspace, Update, Stack) spells kstatus, or a reader would take the
// object for Current whatever it does. It returns what kstatus read.
func kstatusConforms(t *testing.T, obj conditioned) kstatus.Status {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	res, err := kstatus.Compute(&unstructured.Unstructured{Object: m})
	if err != nil {
		t.Fatal(err)
	}
	conds := *obj.GetConditions()
	ready := apimeta.FindStatusCondition(conds, readyCondition)
	if ready == nil && obj.GetDeletionTimestamp() == nil {
		t.Fatalf("no Ready condition (kstatus reads %s): %+v", res.Status, conds)
	}
	want := kstatus.CurrentStatus
	switch {
	case obj.GetDeletionTimestamp() != nil:
		want = kstatus.TerminatingStatus
	case apimeta.IsStatusConditionTrue(conds, stalledCondition):
		want = kstatus.FailedStatus
	case apimeta.IsStatusConditionTrue(conds, reconcilingCondition), ready.Status != metav1.ConditionTrue:
		want = kstatus.InProgressStatus
	}
	if res.Status != want {
		t.Fatalf("kstatus reads %s (%s), the conditions say %s: %+v", res.Status, res.Message, want, conds)
	}
	observed, _, _ := unstructured.NestedInt64(m, "status", "observedGeneration")
	if want == kstatus.CurrentStatus && observed != obj.GetGeneration() {
		t.Fatalf("kstatus Current with status.observedGeneration %d, generation %d", observed, obj.GetGeneration())
	}
	return res.Status
}

// conditionIs fails the test unless obj's condition typ has status and
// reason (status "" for an absent condition).
func conditionIs(t *testing.T, obj conditioned, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	c := apimeta.FindStatusCondition(*obj.GetConditions(), typ)
	switch {
	case status == "" && c == nil:
		return
	case status == "" || c == nil || c.Status != status || c.Reason != reason:
		t.Fatalf("%s = %+v, want %s/%s; all: %+v", typ, c, status, reason, *obj.GetConditions())
	}
	if c.ObservedGeneration != obj.GetGeneration() {
		t.Fatalf("%s describes generation %d, the object is at %d", typ, c.ObservedGeneration, obj.GetGeneration())
	}
}

// fakeRuntime is a workspace runtime whose state the test sets.
type fakeRuntime struct {
	mu      sync.Mutex
	st      workspace.Status
	removed bool
}

func (f *fakeRuntime) set(st workspace.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st = st
}

func (f *fakeRuntime) Ensure(context.Context, *autov1alpha1.Workspace, string) (workspace.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st, nil
}

func (f *fakeRuntime) Remove(context.Context, *autov1alpha1.Workspace) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = true
	return nil
}

// fakeAgent is a workspace agent whose answers the test sets, holding the
// state a real one reports: its revision, last checkout, configured stacks
// and runs. It records the bearer token each call carried.
type fakeAgent struct {
	agentv1.UnimplementedAgentServer
	mu sync.Mutex
	// info is what Info answers (its Checkout the last checkout), unless
	// infoErr is set.
	info    *agentv1.InfoResponse
	infoErr error
	// checkoutFails, when set, is the state the next Checkout ends in.
	checkoutFails *agentv1.CheckoutStatus
	checkouts     []*agentv1.CheckoutRequest
	// selectErr fails SelectStack of a stack.
	selectErr map[string]error
	selected  []string
	// startErr fails StartOperation; starts lists the requests.
	startErr error
	starts   []*agentv1.StartOperationRequest
	// ops are the runs by update ID; ended closes when a run ends.
	ops     map[string]*agentv1.Operation
	ended   map[string]chan struct{}
	watches int
	bearers map[string]bool
}

func newFakeAgent() *fakeAgent {
	return &fakeAgent{
		info:      &agentv1.InfoResponse{Instance: "agent-1", PulumiVersion: "v3.200.0"},
		selectErr: map[string]error{}, ops: map[string]*agentv1.Operation{}, ended: map[string]chan struct{}{}, bearers: map[string]bool{},
	}
}

func (a *fakeAgent) sawBearer(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		a.bearers[strings.TrimPrefix(v, "Bearer ")] = true
	}
}

func (a *fakeAgent) Info(ctx context.Context, _ *agentv1.InfoRequest) (*agentv1.InfoResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sawBearer(ctx)
	if a.infoErr != nil {
		return nil, a.infoErr
	}
	return a.info, nil
}

func (a *fakeAgent) Checkout(ctx context.Context, req *agentv1.CheckoutRequest) (*agentv1.CheckoutStatus, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sawBearer(ctx)
	a.checkouts = append(a.checkouts, req)
	st := &agentv1.CheckoutStatus{SourceRef: req.GetGitRef(), State: agentv1.CheckoutState_CHECKOUT_STATE_RUNNING}
	if f := a.checkoutFails; f != nil {
		st = f
		st.SourceRef = req.GetGitRef()
	} else {
		// Checked out at once: the next Info holds it.
		a.info.SourceRef, a.info.Revision = req.GetGitRef(), req.GetGitRef()
		a.info.Checkouts++
	}
	a.info.Checkout = st
	return st, nil
}

func (a *fakeAgent) SelectStack(ctx context.Context, req *agentv1.SelectStackRequest) (*agentv1.SelectStackResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sawBearer(ctx)
	if err := a.selectErr[req.GetStackName()]; err != nil {
		return nil, err
	}
	a.selected = append(a.selected, req.GetStackName())
	return &agentv1.SelectStackResponse{}, nil
}

func (a *fakeAgent) StartOperation(ctx context.Context, req *agentv1.StartOperationRequest) (*agentv1.Operation, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sawBearer(ctx)
	a.starts = append(a.starts, req)
	if a.startErr != nil {
		return nil, a.startErr
	}
	op := &agentv1.Operation{UpdateId: req.GetUpdateId(), State: agentv1.OperationState_OPERATION_STATE_RUNNING,
		Type: req.GetType(), StackName: req.GetStackName(), StartTimeUnixNano: time.Date(2026, 12, 1, 12, 0, 1, 0, time.UTC).UnixNano()}
	a.ops[req.GetUpdateId()] = op
	a.ended[req.GetUpdateId()] = make(chan struct{})
	return op, nil
}

func (a *fakeAgent) GetOperation(ctx context.Context, req *agentv1.GetOperationRequest) (*agentv1.Operation, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sawBearer(ctx)
	if op, ok := a.ops[req.GetUpdateId()]; ok {
		return op, nil
	}
	return &agentv1.Operation{UpdateId: req.GetUpdateId(), State: agentv1.OperationState_OPERATION_STATE_UNKNOWN}, nil
}

// WatchOperation answers as the agent does: the run's result once it ends.
func (a *fakeAgent) WatchOperation(req *agentv1.GetOperationRequest, stream agentv1.Agent_WatchOperationServer) error {
	a.mu.Lock()
	a.watches++
	ended := a.ended[req.GetUpdateId()]
	a.mu.Unlock()
	if ended == nil {
		return nil
	}
	select {
	case <-ended:
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
	a.mu.Lock()
	op := a.ops[req.GetUpdateId()]
	a.mu.Unlock()
	return stream.Send(&agentv1.OperationEvent{Event: &agentv1.OperationEvent_Result{Result: op}})
}

// end ends a run as op says.
func (a *fakeAgent) end(id string, op *agentv1.Operation) {
	a.mu.Lock()
	defer a.mu.Unlock()
	op.UpdateId = id
	op.StartTimeUnixNano = a.ops[id].StartTimeUnixNano
	a.ops[id] = op
	close(a.ended[id])
}

// do runs f with the agent locked.
func (a *fakeAgent) do(f func(a *fakeAgent)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(a)
}

func ctrlRequest(obj client.Object) ctrl.Request {
	return ctrl.Request{NamespacedName: client.ObjectKeyFromObject(obj)}
}

// conditionsOf lists obj's conditions for a log line.
func conditionsOf(obj conditioned) string {
	var b strings.Builder
	for _, c := range *obj.GetConditions() {
		fmt.Fprintf(&b, "%s=%s/%s (%q) ", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

// findCondition is obj's condition typ, or nil.
func findCondition(obj conditioned, typ string) *metav1.Condition {
	return apimeta.FindStatusCondition(*obj.GetConditions(), typ)
}
