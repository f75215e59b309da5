package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stackflow-io/stackflow/operator/internal/agent"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// gate holds HTTP requests while closed.
type gate struct {
	mu     sync.Mutex
	open   chan struct{}
	closed bool
	held   int
}

func newGate() *gate { g := &gate{open: make(chan struct{})}; close(g.open); return g }

func (g *gate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.open, g.closed = make(chan struct{}), true
	}
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		close(g.open)
		g.closed = false
	}
}

func (g *gate) waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

func (g *gate) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		open := g.open
		g.held++
		g.mu.Unlock()
		select {
		case <-open:
		case <-r.Context().Done():
		}
		g.mu.Lock()
		g.held--
		g.mu.Unlock()
		if r.Context().Err() == nil {
			h.ServeHTTP(w, r)
		}
	})
}

// checkoutEnded polls Info until the checkout of ref has ended.
func checkoutEnded(t *testing.T, c agentv1.AgentClient, ref string) *agentv1.InfoResponse {
	t.Helper()
	var info *agentv1.InfoResponse
	substrate.Eventually(t, 2*time.Minute, "checkout of "+ref+" to end", func() (bool, error) {
		var err error
		if info, err = c.Info(context.Background(), &agentv1.InfoRequest{}); err != nil {
			return false, err
		}
		co := info.GetCheckout()
		return co.GetSourceRef() == ref && co.GetState() != agentv1.CheckoutState_CHECKOUT_STATE_RUNNING, fmt.Errorf("checkout %v", co)
	})
	return info
}

func wantCode(t *testing.T, err error, code codes.Code, contains string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), contains) {
		t.Fatalf("err = %v, want %v containing %q", err, code, contains)
	}
}

// TestAgentChecksOutInPlace: a running agent moves to another commit without
// restarting, refuses work while it checks out, forgets the configuration of
// the previous checkout, keeps its program when a checkout fails, and runs an
// update only at the revision the update asks for.
func TestAgentChecksOutInPlace(t *testing.T) {
	pe := substrate.NewPulumi(t)
	root := t.TempDir()
	repo := gitrepo.NewIn(t, root, "repo.git")
	h, err := gitrepo.Handler(root)
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	srv := httptest.NewServer(g.wrap(h))
	t.Cleanup(srv.Close)
	url := srv.URL + "/repo.git"

	shaA := repo.Commit(t, "a", map[string]string{"Pulumi.yaml": program})
	shaB := repo.Commit(t, "b", map[string]string{"Pulumi.yaml": strings.Replace(program, "recordName: agent-record", "recordName: agent-record-b", 1)})
	shaC := repo.Commit(t, "c", map[string]string{"Pulumi.yaml": strings.Replace(program, "recordName: agent-record", "recordName: agent-record-c", 1)})
	c := dial(t, startAgent(t, pe, agent.Source{GitURL: url, GitRef: shaA}), token)
	ctx := context.Background()
	before, err := c.Info(ctx, &agentv1.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if before.Revision != shaA || before.SourceRef != shaA || before.Checkouts != 0 || before.Checkout != nil {
		t.Fatalf("info at start = %v, want revision and source ref %s, no checkout", before, shaA)
	}
	sel := &agentv1.SelectStackRequest{StackName: "dev", Create: true, Config: []*agentv1.ConfigItem{jsonItem("content", `"v"`)}}
	if _, err := c.SelectStack(ctx, sel); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Checkout(ctx, &agentv1.CheckoutRequest{ArtifactUrl: "http://x/a.tgz", ArtifactDigest: "sha256:00"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("artifact checkout of a git workspace: %v, want InvalidArgument", err)
	}

	// While the fetch is held, the agent refuses operations and
	// configuration; a checkout of another revision replaces it.
	g.shut()
	asked := time.Now()
	st, err := c.Checkout(ctx, &agentv1.CheckoutRequest{GitRef: shaB})
	if err != nil || st.State != agentv1.CheckoutState_CHECKOUT_STATE_RUNNING || st.SourceRef != shaB {
		t.Fatalf("checkout of B = %v, %v; want running", st, err)
	}
	// Its start time (the operator's polls slow down as it lasts).
	if started := time.Unix(0, st.StartTimeUnixNano); started.Before(asked.Add(-time.Second)) || started.After(time.Now()) {
		t.Fatalf("checkout of B started at %s, asked at %s", started, asked)
	}
	substrate.Eventually(t, time.Minute, "the fetch of B to reach the git server", func() (bool, error) {
		return g.waiting() > 0, nil
	})
	_, err = c.StartOperation(ctx, &agentv1.StartOperationRequest{UpdateId: "during", StackName: "dev", Type: agentv1.OperationType_OPERATION_TYPE_PREVIEW})
	wantCode(t, err, codes.FailedPrecondition, "checking out "+shaB)
	_, err = c.SelectStack(ctx, &agentv1.SelectStackRequest{StackName: "dev", Create: true, Config: []*agentv1.ConfigItem{jsonItem("content", `"w"`)}})
	wantCode(t, err, codes.FailedPrecondition, "checking out "+shaB)
	if again, err := c.Checkout(ctx, &agentv1.CheckoutRequest{GitRef: shaB}); err != nil || again.State != agentv1.CheckoutState_CHECKOUT_STATE_RUNNING {
		t.Fatalf("the same checkout again = %v, %v; want it running", again, err)
	}
	if st, err := c.Checkout(ctx, &agentv1.CheckoutRequest{GitRef: shaC}); err != nil || st.SourceRef != shaC {
		t.Fatalf("checkout of C = %v, %v", st, err)
	}
	g.release()
	info := checkoutEnded(t, c, shaC)
	if co := info.Checkout; co.State != agentv1.CheckoutState_CHECKOUT_STATE_SUCCEEDED || co.Revision != shaC || co.EndTimeUnixNano == 0 {
		t.Fatalf("checkout of C = %v, want succeeded at %s", co, shaC)
	}
	if info.Revision != shaC || info.SourceRef != shaC || info.Checkouts != 1 || info.Instance != before.Instance || info.WorkDir == before.WorkDir {
		t.Fatalf("info after checkout = %v; want revision %s, 1 checkout, instance %s, a new directory", info, shaC, before.Instance)
	}

	// The configuration belonged to the previous checkout.
	_, err = c.StartOperation(ctx, &agentv1.StartOperationRequest{UpdateId: "unconfigured", StackName: "dev", Type: agentv1.OperationType_OPERATION_TYPE_UP})
	wantCode(t, err, codes.FailedPrecondition, "not configured")
	if _, err := c.SelectStack(ctx, sel); err != nil {
		t.Fatalf("select after checkout: %v", err)
	}
	_, err = c.StartOperation(ctx, &agentv1.StartOperationRequest{UpdateId: "stale", StackName: "dev", Type: agentv1.OperationType_OPERATION_TYPE_UP, Revision: shaA})
	wantCode(t, err, codes.FailedPrecondition, "at revision "+shaC+", not "+shaA)
	if _, err := c.StartOperation(ctx, &agentv1.StartOperationRequest{UpdateId: "up-c", StackName: "dev", Type: agentv1.OperationType_OPERATION_TYPE_UP, Revision: shaC}); err != nil {
		t.Fatal(err)
	}
	up, _ := wait(t, c, "up-c")
	if up.State != agentv1.OperationState_OPERATION_STATE_SUCCEEDED || up.Revision != shaC {
		t.Fatalf("up at C = %v %q revision %s", up.State, up.Message, up.Revision)
	}
	if _, ok := pe.Record(t, "agent-record-c"); !ok {
		t.Fatal("the up did not run C's program (no agent-record-c)")
	}

	// A missing commit fails the checkout and leaves C, configured, in place.
	missing := strings.Repeat("ab", 20)
	if _, err := c.Checkout(ctx, &agentv1.CheckoutRequest{GitRef: missing}); err != nil {
		t.Fatal(err)
	}
	info = checkoutEnded(t, c, missing)
	if co := info.Checkout; co.State != agentv1.CheckoutState_CHECKOUT_STATE_FAILED || co.Reason != agent.ReasonSourceUnavailable || !strings.Contains(co.Message, "commit "+missing+" not found") {
		t.Fatalf("checkout of a missing commit = %v, want failed, SourceUnavailable", co)
	}
	if info.Revision != shaC || info.Checkouts != 1 {
		t.Fatalf("after a failed checkout: revision %s, %d checkouts; want %s, 1", info.Revision, info.Checkouts, shaC)
	}
	if _, err := c.StartOperation(ctx, &agentv1.StartOperationRequest{UpdateId: "preview-c", StackName: "dev", Type: agentv1.OperationType_OPERATION_TYPE_PREVIEW}); err != nil {
		t.Fatalf("preview after a failed checkout: %v", err)
	}
	if pre, _ := wait(t, c, "preview-c"); pre.State != agentv1.OperationState_OPERATION_STATE_SUCCEEDED {
		t.Fatalf("preview after a failed checkout = %v %q", pre.State, pre.Message)
	}

	// No checkout under a running update.
	slow := &agentv1.SelectStackRequest{StackName: "dev", Create: true, Config: []*agentv1.ConfigItem{jsonItem("content", `"slow"`), jsonItem("sleep", `3`)}}
	if _, err := c.SelectStack(ctx, slow); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartOperation(ctx, &agentv1.StartOperationRequest{UpdateId: "slow", StackName: "dev", Type: agentv1.OperationType_OPERATION_TYPE_UP}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Checkout(ctx, &agentv1.CheckoutRequest{GitRef: shaB})
	wantCode(t, err, codes.FailedPrecondition, "update slow is running on stack dev")
	if op, _ := wait(t, c, "slow"); op.State != agentv1.OperationState_OPERATION_STATE_SUCCEEDED {
		t.Fatalf("slow up = %v %q", op.State, op.Message)
	}
	if st, err := c.Checkout(ctx, &agentv1.CheckoutRequest{GitRef: shaC}); err != nil || st.State != agentv1.CheckoutState_CHECKOUT_STATE_SUCCEEDED {
		t.Fatalf("checkout of the revision in place = %v, %v; want succeeded at once", st, err)
	}
}
