package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/agent"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

const program = `name: agenttest
runtime: yaml
config:
  content:
    type: string
  replicas:
    type: integer
    default: 1
  settings:
    default: {}
  sleep:
    type: integer
    default: 0
variables:
  recordName: agent-record
resources:
  rec:
    type: stackflowtest:index:Record
    properties:
      name: ${recordName}
      content: ${content}
      sleepSeconds: ${sleep}
outputs:
  content: ${rec.content}
  replicas: ${replicas}
  settings: ${settings}
  secretOut:
    fn::secret: ${content}
`

const token = "correct-horse-battery-staple"

// startAgent serves an agent for a program on loopback and returns its address.
func startAgent(t *testing.T, pe *substrate.Pulumi, src agent.Source) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrFile := filepath.Join(t.TempDir(), "addr")
	errc := make(chan error, 1)
	go func() {
		errc <- agent.Serve(ctx, testr.New(t), agent.Options{
			WorkDir: t.TempDir(), Source: src, PulumiRoot: pe.Paths.PulumiRoot, Env: pe.EnvVars(),
		}, agent.ServeOptions{Listen: "127.0.0.1:0", AddressFile: addrFile, Auth: agent.TokenAuthenticator{Token: token}})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	var addr string
	deadline := time.Now().Add(2 * time.Minute)
	for addr == "" {
		select {
		case err := <-errc:
			t.Fatalf("agent stopped: %v", err)
		default:
		}
		if b, err := os.ReadFile(addrFile); err == nil {
			addr = string(b)
		} else if time.Now().After(deadline) {
			t.Fatal("agent did not start")
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	return addr
}

func dial(t *testing.T, addr, tok string) agentv1.AgentClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok), method, req, reply, cc, opts...)
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok), desc, cc, method, opts...)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return agentv1.NewAgentClient(conn)
}

func jsonItem(key, value string) *agentv1.ConfigItem {
	return &agentv1.ConfigItem{Key: key, Source: &agentv1.ConfigItem_ValueJson{ValueJson: value}}
}

// wait follows a run to its end through WatchOperation and returns the result
// and the log lines streamed.
func wait(t *testing.T, c agentv1.AgentClient, id string) (*agentv1.Operation, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stream, err := c.WatchOperation(ctx, &agentv1.GetOperationRequest{UpdateId: id})
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			t.Fatal("stream ended without a result")
		}
		if err != nil {
			t.Fatal(err)
		}
		if r := ev.GetResult(); r != nil {
			return r, logs
		}
		if l := ev.GetLog(); l != "" {
			logs = append(logs, l)
		}
	}
}

func start(t *testing.T, c agentv1.AgentClient, id string, typ agentv1.OperationType) *agentv1.Operation {
	t.Helper()
	op, err := c.StartOperation(context.Background(), &agentv1.StartOperationRequest{UpdateId: id, StackName: "dev", Type: typ})
	if err != nil {
		t.Fatal(err)
	}
	return op
}

func TestAgentRunsOperations(t *testing.T) {
	pe := substrate.NewPulumi(t)
	repo := gitrepo.New(t)
	sha := repo.Commit(t, "program", map[string]string{"Pulumi.yaml": program})
	c := dial(t, startAgent(t, pe, agent.Source{GitURL: repo.URL(), GitRef: "main"}), token)
	ctx := context.Background()

	info, err := c.Info(ctx, &agentv1.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Revision != sha || info.ProjectName != "agenttest" || info.ProjectRuntime != "yaml" || info.PulumiVersion != "3.274.1" {
		t.Fatalf("info = %+v, want revision %s of project agenttest (yaml) with pulumi 3.274.1", info, sha)
	}

	_, err = c.SelectStack(ctx, &agentv1.SelectStackRequest{StackName: "dev", Create: true, Config: []*agentv1.ConfigItem{
		jsonItem("content", `"top secret value"`),
		jsonItem("replicas", `3`),
		jsonItem("settings", `{"tier": "gold", "zones": ["a", "b"]}`),
	}})
	if err != nil {
		t.Fatal(err)
	}
	// Mark content secret: SelectStack replaces the configuration.
	items := []*agentv1.ConfigItem{
		{Key: "content", Secret: true, Source: &agentv1.ConfigItem_ValueJson{ValueJson: `"top secret value"`}},
		jsonItem("replicas", `3`),
		jsonItem("settings", `{"tier": "gold", "zones": ["a", "b"]}`),
	}
	if _, err := c.SelectStack(ctx, &agentv1.SelectStackRequest{StackName: "dev", Create: true, Config: items}); err != nil {
		t.Fatal(err)
	}

	// Preview changes nothing.
	start(t, c, "preview-1", agentv1.OperationType_OPERATION_TYPE_PREVIEW)
	pre, _ := wait(t, c, "preview-1")
	if pre.State != agentv1.OperationState_OPERATION_STATE_SUCCEEDED || pre.Changes["create"] != 2 {
		t.Fatalf("preview = %v %q changes %v, want success with 2 creates", pre.State, pre.Message, pre.Changes)
	}
	if _, ok := pe.Record(t, "agent-record"); ok {
		t.Fatal("preview created the record")
	}

	op := start(t, c, "up-1", agentv1.OperationType_OPERATION_TYPE_UP)
	if op.State != agentv1.OperationState_OPERATION_STATE_RUNNING {
		t.Fatalf("start state = %v", op.State)
	}
	up, logs := wait(t, c, "up-1")
	if up.State != agentv1.OperationState_OPERATION_STATE_SUCCEEDED {
		t.Fatalf("up = %v: %s", up.State, up.Message)
	}
	if c, ok := pe.Record(t, "agent-record"); !ok || c != "top secret value" {
		t.Fatalf("record = %q, %v", c, ok)
	}
	if up.Changes["create"] != 2 || up.Revision != sha || up.EndTimeUnixNano < up.StartTimeUnixNano {
		t.Fatalf("up result = %+v", up)
	}
	outs := map[string]string{}
	for k, v := range up.Outputs {
		outs[k] = v.ValueJson
	}
	if outs["replicas"] != "3" || !up.Outputs["secretOut"].GetSecret() || up.Outputs["replicas"].GetSecret() {
		t.Fatalf("outputs = %v (secretOut secret=%v)", outs, up.Outputs["secretOut"].GetSecret())
	}
	var settings map[string]any
	if err := json.Unmarshal([]byte(outs["settings"]), &settings); err != nil || settings["tier"] != "gold" {
		t.Fatalf("structured config output = %s (%v)", outs["settings"], err)
	}
	if len(logs) == 0 {
		t.Fatal("no engine output streamed")
	}
	for _, l := range logs {
		if strings.Contains(l, "top secret value") {
			t.Fatalf("secret value streamed in log line %q", l)
		}
	}
	// Re-starting the same update ID reports the same run.
	again := start(t, c, "up-1", agentv1.OperationType_OPERATION_TYPE_UP)
	if again.State != agentv1.OperationState_OPERATION_STATE_SUCCEEDED || again.StartTimeUnixNano != up.StartTimeUnixNano {
		t.Fatalf("restart of a finished ID = %v, want its recorded result", again)
	}
	unknown, err := c.GetOperation(ctx, &agentv1.GetOperationRequest{UpdateId: "never-started"})
	if err != nil || unknown.State != agentv1.OperationState_OPERATION_STATE_UNKNOWN {
		t.Fatalf("unknown ID = %v, %v", unknown, err)
	}

	// Drift: an out-of-band edit found by refresh.
	if err := os.WriteFile(filepath.Join(pe.RecordsDir, "agent-record"), []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	start(t, c, "refresh-1", agentv1.OperationType_OPERATION_TYPE_REFRESH)
	ref, _ := wait(t, c, "refresh-1")
	if ref.State != agentv1.OperationState_OPERATION_STATE_SUCCEEDED || ref.Changes["update"] != 1 {
		t.Fatalf("refresh = %v %v", ref.State, ref.Changes)
	}

	start(t, c, "destroy-1", agentv1.OperationType_OPERATION_TYPE_DESTROY)
	des, _ := wait(t, c, "destroy-1")
	if des.State != agentv1.OperationState_OPERATION_STATE_SUCCEEDED || des.Changes["delete"] != 2 {
		t.Fatalf("destroy = %v %q %v", des.State, des.Message, des.Changes)
	}
	if _, ok := pe.Record(t, "agent-record"); ok {
		t.Fatal("destroy left the record")
	}
}

func TestAgentRefusesBadCallers(t *testing.T) {
	pe := substrate.NewPulumi(t)
	repo := gitrepo.New(t)
	repo.Commit(t, "program", map[string]string{"Pulumi.yaml": program})
	addr := startAgent(t, pe, agent.Source{GitURL: repo.URL(), GitRef: "main"})
	if _, err := dial(t, addr, token).Info(context.Background(), &agentv1.InfoRequest{}); err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{"no token": "", "wrong token": "wrong"} {
		c := dial(t, addr, tok)
		_, err := c.Info(context.Background(), &agentv1.InfoRequest{})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: Info err = %v, want Unauthenticated", name, err)
		}
		_, err = c.StartOperation(context.Background(), &agentv1.StartOperationRequest{UpdateId: "x", StackName: "dev", Type: agentv1.OperationType_OPERATION_TYPE_UP})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: StartOperation err = %v, want Unauthenticated", name, err)
		}
		stream, err := c.WatchOperation(context.Background(), &agentv1.GetOperationRequest{UpdateId: "x"})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: WatchOperation err = %v, want Unauthenticated", name, err)
		}
	}
	if _, ok := pe.Record(t, "agent-record"); ok {
		t.Fatal("an unauthenticated call ran an update")
	}
}

// TestAgentBadInput: unknown stack, invalid JSON, missing env — clear errors,
// nothing lost.
func TestAgentBadInput(t *testing.T) {
	pe := substrate.NewPulumi(t)
	repo := gitrepo.New(t)
	repo.Commit(t, "program", map[string]string{"Pulumi.yaml": program})
	c := dial(t, startAgent(t, pe, agent.Source{GitURL: repo.URL(), GitRef: "main"}), token)
	ctx := context.Background()

	_, err := c.SelectStack(ctx, &agentv1.SelectStackRequest{StackName: "dev", Create: true, Config: []*agentv1.ConfigItem{
		{Key: "content", Secret: true, Source: &agentv1.ConfigItem_ValueJson{ValueJson: `{"unterminated": "hunter2-secret`}},
	}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "config content: value is not valid JSON") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("invalid JSON err = %v", err)
	}
	_, err = c.SelectStack(ctx, &agentv1.SelectStackRequest{StackName: "dev", Create: true, Config: []*agentv1.ConfigItem{
		{Key: "content", Source: &agentv1.ConfigItem_ValueFromEnv{ValueFromEnv: "STACKFLOW_TEST_UNSET_VARIABLE"}},
	}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "environment variable STACKFLOW_TEST_UNSET_VARIABLE is not set") {
		t.Fatalf("missing env err = %v", err)
	}
	_, err = c.SelectStack(ctx, &agentv1.SelectStackRequest{StackName: "nope", Create: false})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "stack nope does not exist") {
		t.Fatalf("unknown stack err = %v", err)
	}
	_, err = c.StartOperation(ctx, &agentv1.StartOperationRequest{UpdateId: "u", StackName: "missing", Type: agentv1.OperationType_OPERATION_TYPE_UP})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "stack missing is not configured in this workspace yet") {
		t.Fatalf("op on an unconfigured stack: err = %v", err)
	}
	if st, _ := c.GetOperation(ctx, &agentv1.GetOperationRequest{UpdateId: "u"}); st.GetState() != agentv1.OperationState_OPERATION_STATE_UNKNOWN {
		t.Fatalf("a refused operation was recorded: %v", st)
	}
}

// TestAgentSourceErrors: an unreachable repository, a missing branch or commit,
// a missing or mismatching artifact fail preparation with an error naming the
// problem, classified SourceUnavailable when the source is missing or refused
// (and unclassified when the failure may pass, such as a refused connection).
func TestAgentSourceErrors(t *testing.T) {
	repo := gitrepo.New(t)
	repo.Commit(t, "program", map[string]string{"Pulumi.yaml": program})
	tarball := []byte("not the expected bytes")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/a.tgz":
			_, _ = w.Write(tarball)
		case "/busy.tgz":
			http.Error(w, "busy", http.StatusServiceUnavailable)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	digest := "sha256:" + strings.Repeat("0", 64)
	const unavailable = agent.ReasonSourceUnavailable
	cases := []struct {
		name   string
		src    agent.Source
		want   string
		reason string
	}{
		{"missing repository", agent.Source{GitURL: "file:///nonexistent/repo.git", GitRef: "main"}, "fetch file:///nonexistent/repo.git at main", unavailable},
		{"connection refused", agent.Source{GitURL: "http://127.0.0.1:1/repo.git", GitRef: "main"}, "fetch http://127.0.0.1:1/repo.git at main", ""},
		{"missing branch", agent.Source{GitURL: repo.URL(), GitRef: "release"}, `branch "release" not found in ` + repo.URL(), unavailable},
		{"missing commit", agent.Source{GitURL: repo.URL(), GitRef: strings.Repeat("ab", 20)}, "commit abababababababababababababababababababab not found in " + repo.URL(), unavailable},
		{"no project in dir", agent.Source{GitURL: repo.URL(), GitRef: "main", Dir: "sub"}, `no Pulumi.yaml in program directory`, unavailable},
		{"escaping dir", agent.Source{GitURL: repo.URL(), GitRef: "main", Dir: "../.."}, `escapes the source`, unavailable},
		{"no source", agent.Source{}, "no program source", unavailable},
		{"bad digest form", agent.Source{ArtifactURL: "http://127.0.0.1:1/a.tgz", ArtifactDigest: "md5:abc"}, "is not of the form sha256", unavailable},
		{"artifact not found", agent.Source{ArtifactURL: srv.URL + "/gone.tgz", ArtifactDigest: digest}, "HTTP 404 Not Found", unavailable},
		{"artifact server busy", agent.Source{ArtifactURL: srv.URL + "/busy.tgz", ArtifactDigest: digest}, "HTTP 503 Service Unavailable", ""},
		{"artifact digest mismatch", agent.Source{ArtifactURL: srv.URL + "/a.tgz", ArtifactDigest: digest}, "digest mismatch", unavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := agent.Fetch(context.Background(), tc.src, t.TempDir())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if got := agent.FailureReason(err); got != tc.reason {
				t.Fatalf("FailureReason(%v) = %q, want %q", err, got, tc.reason)
			}
			line := agent.TerminationMessage(err)
			if strings.Contains(line, "\n") || !strings.HasPrefix(line, tc.reason) {
				t.Fatalf("TerminationMessage = %q: want one line starting with %q", line, tc.reason)
			}
		})
	}
}

// TestAgentReasonsAreWorkspaceReasons: the runtimes report the agent's
// classification as the Workspace condition reason of the same name.
func TestAgentReasonsAreWorkspaceReasons(t *testing.T) {
	if agent.ReasonSourceUnavailable != autov1alpha1.WorkspaceReasonSourceUnavailable ||
		agent.ReasonInstallationFailed != autov1alpha1.WorkspaceReasonInstallationFailed {
		t.Fatal("the agent's failure reasons differ from the Workspace reasons")
	}
	err := fmt.Errorf("fetch program: %w", &agent.PrepareError{Reason: agent.ReasonSourceUnavailable, Err: errors.New("commit 01 not found\nin x")})
	if got, want := agent.TerminationMessage(err), "SourceUnavailable: fetch program: commit 01 not found in x"; got != want {
		t.Fatalf("TerminationMessage = %q, want %q", got, want)
	}
	if got := agent.TerminationMessage(errors.New("listen on :1: address in use")); got != "listen on :1: address in use" {
		t.Fatalf("unclassified TerminationMessage = %q", got)
	}
}

// TestAgentHugeOutputKeepsTheStreamIntact: through the real engine, the
// agent's gRPC server and WatchOperation, a program with a 6 MiB stack output
// (a result over gRPC's 4 MiB message limit) and, on another stack, a
// provider error echoing those 6 MiB (one line without a newline in the
// engine's output) run to their ends: each stream carries every event, the
// error's line cut and marked, and ends with the result; the output too
// large is left out with a notice naming it, the others kept; GetOperation
// answers. The old agent ended both streams with ResourceExhausted ("received
// message larger than max"). (The 200 MiB cases run in
// TestHugeOutputKeepsMemoryBounded and TestInstallPrintingAHugeLine: through
// the engine they would take minutes and gigabytes of the CLI's own memory.)
func TestAgentHugeOutputKeepsTheStreamIntact(t *testing.T) {
	const huge = 6 << 20
	pe := substrate.NewPulumi(t)
	repo := gitrepo.New(t)
	repo.Commit(t, "program", map[string]string{"Pulumi.yaml": `name: hugeoutput
runtime: yaml
config:
  failOn:
    type: string
    default: ""
resources:
  rec:
    type: stackflowtest:index:Record
    properties:
      name: huge-${pulumi.stack}
      content: "` + strings.Repeat("h", huge) + `"
  loud:
    type: stackflowtest:index:Record
    properties:
      name: loud-${pulumi.stack}
      content: small
      failOn: ${failOn}
      echo: ${rec.content}
outputs:
  content: ${rec.content}
  small: ok
`})
	c := dial(t, startAgent(t, pe, agent.Source{GitURL: repo.URL(), GitRef: "main"}), token)
	ctx := context.Background()
	for stack, failOn := range map[string]string{"dev": `""`, "loud": `"create"`} {
		if _, err := c.SelectStack(ctx, &agentv1.SelectStackRequest{StackName: stack, Create: true, Config: []*agentv1.ConfigItem{jsonItem("failOn", failOn)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.StartOperation(ctx, &agentv1.StartOperationRequest{UpdateId: "up-" + stack, StackName: stack, Type: agentv1.OperationType_OPERATION_TYPE_UP}); err != nil {
			t.Fatal(err)
		}
	}
	// cutLines are the streamed lines that hold the 6 MiB value, which must
	// all be cut.
	cutLines := func(logs []string) int {
		t.Helper()
		n := 0
		for _, l := range logs {
			if len(l) > 2*(64<<10)+64 {
				t.Fatalf("a log line of %d bytes", len(l))
			}
			if strings.Contains(l, strings.Repeat("h", 4096)) {
				if !strings.HasSuffix(l, "… [line cut at 65536 bytes]") {
					t.Fatalf("a line of the value is not cut: %d bytes ending %q", len(l), l[max(0, len(l)-40):])
				}
				n++
			}
		}
		return n
	}

	up, logs := wait(t, c, "up-dev")
	if up.State != agentv1.OperationState_OPERATION_STATE_SUCCEEDED {
		t.Fatalf("up = %v: %s", up.State, up.Message)
	}
	if content, ok := pe.Record(t, "huge-dev"); !ok || len(content) != huge {
		t.Fatalf("record of %d bytes (%v), want %d", len(content), ok, huge)
	}
	if _, ok := up.Outputs["content"]; ok || up.Outputs["small"].GetValueJson() != `"ok"` {
		t.Fatalf("outputs %v: want small, not content", slices.Sorted(maps.Keys(up.Outputs)))
	}
	if notices := strings.Join(up.Notices, "; "); !strings.Contains(notices, "output content") {
		t.Fatalf("notices %q: want the output left out named", notices)
	}
	t.Logf("up of dev: %d log lines streamed, %d of them cut; notices: %s", len(logs), cutLines(logs), up.Notices)
	got, err := c.GetOperation(ctx, &agentv1.GetOperationRequest{UpdateId: "up-dev"})
	if err != nil || got.State != up.State || len(got.Outputs) != len(up.Outputs) {
		t.Fatalf("GetOperation = %v, %v", got, err)
	}

	failed, logs := wait(t, c, "up-loud")
	if failed.State != agentv1.OperationState_OPERATION_STATE_FAILED || !strings.Contains(failed.Message, "failOn=create: create refused") || len(failed.Message) > 8<<10 {
		t.Fatalf("up of loud = %v: %d bytes of message %.200q", failed.State, len(failed.Message), failed.Message)
	}
	cut := cutLines(logs)
	t.Logf("up of loud: %d log lines streamed, %d of them cut; message of %d bytes", len(logs), cut, len(failed.Message))
	if cut == 0 {
		t.Fatalf("no line of the error echoing the value among the %d streamed", len(logs))
	}
}
