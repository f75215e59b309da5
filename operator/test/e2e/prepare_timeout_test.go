package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stackflow-io/stackflow/internal/revision"
	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

// TestStackHungInstallTimesOut: a pushed commit whose `pulumi install` hangs
// (it downloads a provider plugin from a server that accepts the request and
// never answers) does not leave the Stack Progressing for ever: once the
// operator's --workspace-prepare-timeout has passed, the agent stops the
// install, the Workspace stalls (InstallationFailed) and so does the Stack,
// saying that the install did not finish in time and what it printed last.
// The agent keeps the previous revision, and the next commit deploys in the
// same agent process.
func TestStackHungInstallTimesOut(t *testing.T) {
	const timeout = 30 * time.Second
	plugins := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // a registry that never answers
	}))
	t.Cleanup(func() {
		plugins.CloseClientConnections()
		plugins.Close()
	})
	e := newEnv(t)
	e.opts.StackResyncOverride = time.Second
	e.opts.WorkspacePrepareTimeout = timeout
	startOperator(t, e.opts)
	repo := gitrepo.New(t)
	sha1 := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})
	s := newStack(e.ns, "hung", pulumiv1.StackSpec{Stack: "hung", GitSource: gitSpec(repo.URL(), "main", ""),
		Config: cfg("recordName", "hung", "content", "one")})
	if err := cp.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitStack(t, s, 3*time.Minute, "ready at the first commit", readyAt(sha1))
	pid := agentPID(t, e, "hung")

	hangs := strings.Replace(stackProgram, "outputs:\n", `  hang:
    type: hangpkg:index:Thing
    options:
      version: 1.2.3
      pluginDownloadURL: `+plugins.URL+`/
outputs:
`, 1)
	sha2 := repo.Commit(t, "v2: a plugin from a registry that hangs", map[string]string{"Pulumi.yaml": hangs})
	pushed := time.Now()
	const said = "install dependencies (pulumi install): did not finish within 30s (--prepare-timeout); its last output: "
	waitStack(t, s, timeout+3*time.Minute, "stalled on the hung install", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.StalledCondition)
		return c != nil && c.Reason == pulumiv1.StalledWorkspaceFailedReason && strings.Contains(c.Message, "check out "+sha2+": "+said) &&
			s.Status.ObservedGeneration == s.Generation
	})
	msg := condition(s, pulumiv1.StalledCondition).Message
	t.Logf("Stack Stalled %s after the push: %s", time.Since(pushed).Round(time.Second), msg)
	if last := msg[strings.Index(msg, said)+len(said):]; strings.HasPrefix(last, "(none)") || strings.TrimSpace(last) == "" {
		t.Fatalf("the message does not show the install's last output line: %s", msg)
	}
	if ready := condition(s, pulumiv1.ReadyCondition); ready == nil || ready.Status != metav1.ConditionFalse {
		t.Fatalf("Ready = %v, want False", ready)
	}
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "hung"}}
	if err := get(t, ws); err != nil {
		t.Fatal(err)
	}
	if c := apimeta.FindStatusCondition(ws.Status.Conditions, autov1alpha1.WorkspaceStalled); c == nil ||
		c.Reason != autov1alpha1.WorkspaceReasonInstallationFailed || !strings.Contains(c.Message, "the agent keeps "+revision.Short(sha1)) {
		t.Fatalf("Workspace Stalled = %v, want InstallationFailed keeping the first commit", c)
	}
	if got, _ := e.pe.Record(t, "hung"); got != "one" {
		t.Fatalf("record = %q, want the first commit's", got)
	}

	// The fix is pushed: checked out at once (a new revision is not held
	// back by the failed one's retry), by the same agent.
	sha3 := repo.Commit(t, "v3", map[string]string{"Pulumi.yaml": strings.Replace(stackProgram, "content: ${content}", "content: fixed-${content}", 1)})
	waitStack(t, s, 3*time.Minute, "ready at the fixing commit", readyAt(sha3))
	if got, _ := e.pe.Record(t, "hung"); got != "fixed-one" {
		t.Fatalf("record = %q, want the fixing commit's", got)
	}
	if got := agentPID(t, e, "hung"); got != pid {
		t.Fatalf("the agent was replaced (pid %d, was %d): the timeout should leave it serving", got, pid)
	}
}
