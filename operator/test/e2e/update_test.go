package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/controller"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

// agentPID reads the local runtime's record of a workspace's agent process.
func agentPID(t testing.TB, e *env, ws string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.opts.LocalRoot, e.ns, ws, "agent.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ PID int }
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st.PID
}

// history reads the stack's update history from the backend.
func history(t testing.TB, e *env, repo *gitrepo.Repo) []auto.UpdateSummary {
	t.Helper()
	return stackHistory(t, e, repo, "dev")
}

// stackHistory reads a named stack's update history from the backend.
func stackHistory(t testing.TB, e *env, repo *gitrepo.Repo, name string) []auto.UpdateSummary {
	t.Helper()
	st := e.pe.Stack(t, repo.Work, name)
	h, err := st.History(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestUpdatesRunOperations drives preview, up, a config-only change, refresh
// with drift and destroy through Update objects, checking the records, the
// outputs Secret and the backend history.
func TestUpdatesRunOperations(t *testing.T) {
	e := newEnv(t)
	startOperator(t, e.opts)
	repo := gitrepo.New(t)
	sha := repo.Commit(t, "program", map[string]string{"Pulumi.yaml": recordProgram, ".gitignore": "Pulumi.*.yaml\n"})
	ctx := context.Background()

	ws := newWorkspace(e.ns, "ops", repo.URL(), stackConfig("content", "first", "recordName", "ops-record"))
	if err := cp.Client.Create(ctx, ws); err != nil {
		t.Fatal(err)
	}
	waitWorkspaceReady(t, ws, 2*time.Minute)
	if ws.Status.PulumiVersion != "3.274.1" || !strings.HasPrefix(ws.Status.Address, "127.0.0.1:") {
		t.Fatalf("workspace status = %+v", ws.Status)
	}
	pid := agentPID(t, e, "ops")

	pre := runUpdate(t, newUpdate(e.ns, "preview", "ops", autov1alpha1.PreviewType), 2*time.Minute)
	if !succeeded(pre) || pre.Status.Changes["create"] != 2 {
		t.Fatalf("preview: %s %q changes %v", reason(pre), pre.Status.Message, pre.Status.Changes)
	}
	if _, ok := e.pe.Record(t, "ops-record"); ok {
		t.Fatal("preview created the record")
	}

	up := runUpdate(t, newUpdate(e.ns, "up", "ops", autov1alpha1.UpType), 2*time.Minute)
	if !succeeded(up) || reason(up) != autov1alpha1.UpdateReasonSucceeded || up.Status.Changes["create"] != 2 {
		t.Fatalf("up: %s %q changes %v", reason(up), up.Status.Message, up.Status.Changes)
	}
	if got, _ := e.pe.Record(t, "ops-record"); got != "first" {
		t.Fatalf("record = %q", got)
	}
	if up.Status.StartTime.IsZero() || up.Status.EndTime.Before(&up.Status.StartTime) {
		t.Fatalf("times: %v → %v", up.Status.StartTime, up.Status.EndTime)
	}
	var outs corev1.Secret
	if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: e.ns, Name: up.Status.Outputs}, &outs); err != nil {
		t.Fatalf("outputs secret %q: %v", up.Status.Outputs, err)
	}
	if up.Status.Outputs != "up-stack-outputs" || string(outs.Data["content"]) != `"first"` || outs.Immutable == nil || !*outs.Immutable {
		t.Fatalf("outputs secret = %+v", outs)
	}
	if outs.Annotations[controller.SecretsAnnotation] != `["secretContent"]` {
		t.Fatalf("secret keys annotation = %q", outs.Annotations[controller.SecretsAnnotation])
	}
	if strings.Contains(up.Status.Message, "first") {
		t.Fatalf("status message carries an output value: %q", up.Status.Message)
	}

	// A config-only change is applied through the agent: same process.
	mutate(t, ws, func() { ws.Spec.Stacks[0].Config = stackConfig("content", "second", "recordName", "ops-record") })
	waitWorkspaceReady(t, ws, time.Minute)
	if got := agentPID(t, e, "ops"); got != pid {
		t.Fatalf("a config-only change restarted the agent (pid %d → %d)", pid, got)
	}
	up2 := runUpdate(t, newUpdate(e.ns, "up-2", "ops", autov1alpha1.UpType), 2*time.Minute)
	if !succeeded(up2) || up2.Status.Changes["update"] != 1 {
		t.Fatalf("up after config change: %s %q %v", reason(up2), up2.Status.Message, up2.Status.Changes)
	}
	if got, _ := e.pe.Record(t, "ops-record"); got != "second" {
		t.Fatalf("record after config change = %q", got)
	}

	// Drift: edit the record behind Pulumi's back; refresh finds it.
	if err := os.WriteFile(filepath.Join(e.pe.RecordsDir, "ops-record"), []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	ref := runUpdate(t, newUpdate(e.ns, "refresh", "ops", autov1alpha1.RefreshType), 2*time.Minute)
	if !succeeded(ref) || ref.Status.Changes["update"] != 1 {
		t.Fatalf("refresh: %s %q %v", reason(ref), ref.Status.Message, ref.Status.Changes)
	}

	des := runUpdate(t, newUpdate(e.ns, "destroy", "ops", autov1alpha1.DestroyType), 2*time.Minute)
	if !succeeded(des) || des.Status.Changes["delete"] != 2 {
		t.Fatalf("destroy: %s %q %v", reason(des), des.Status.Message, des.Status.Changes)
	}
	if _, ok := e.pe.Record(t, "ops-record"); ok {
		t.Fatal("destroy left the record")
	}

	var kinds []string
	for _, h := range history(t, e, repo) {
		kinds = append(kinds, h.Kind)
		if h.Kind == "update" && h.Environment["git.head"] != sha {
			t.Errorf("history entry %d records git.head %q, want %s", h.Version, h.Environment["git.head"], sha)
		}
	}
	if got := strings.Join(kinds, ","); got != "destroy,refresh,update,update" {
		t.Fatalf("backend history (newest first) = %s", got)
	}
}

// TestFailingResourceFailsTheUpdate: the engine's error reaches the Update,
// and nothing half-written appears in its status.
func TestFailingResourceFailsTheUpdate(t *testing.T) {
	e := newEnv(t)
	startOperator(t, e.opts)
	repo := gitrepo.New(t)
	repo.Commit(t, "program", map[string]string{"Pulumi.yaml": recordProgram})
	ws := newWorkspace(e.ns, "failing", repo.URL(), stackConfig("content", "x", "recordName", "bad", "failOn", "create"))
	if err := cp.Client.Create(context.Background(), ws); err != nil {
		t.Fatal(err)
	}
	waitWorkspaceReady(t, ws, 2*time.Minute)
	up := runUpdate(t, newUpdate(e.ns, "up", "failing", autov1alpha1.UpType), 2*time.Minute)
	if succeeded(up) || reason(up) != autov1alpha1.UpdateReasonFailed {
		t.Fatalf("up: %s %q", reason(up), up.Status.Message)
	}
	if !strings.Contains(up.Status.Message, `record "bad": failOn=create: create refused`) {
		t.Fatalf("message = %q, want the provider's error", up.Status.Message)
	}
	if up.Status.Outputs != "" {
		t.Fatalf("a failed update recorded outputs %q", up.Status.Outputs)
	}
	if _, ok := e.pe.Record(t, "bad"); ok {
		t.Fatal("the failed record exists")
	}
}

// TestUpdatesRunAtTheirCommit: an Update made for a commit (the Stack
// controller's revision annotation) runs only in a workspace set to that
// commit; one for another commit is ended as Aborted without running, and a
// workspace moved to a new commit checks it out in place, in the same agent.
func TestUpdatesRunAtTheirCommit(t *testing.T) {
	e := newEnv(t)
	startOperator(t, e.opts)
	repo := gitrepo.New(t)
	shaA := repo.Commit(t, "a", map[string]string{"Pulumi.yaml": recordProgram})
	shaB := repo.Commit(t, "b", map[string]string{"Pulumi.yaml": strings.Replace(recordProgram, "content: ${content}", "content: b-${content}", 1)})
	ctx := context.Background()
	ws := newWorkspace(e.ns, "pinned", repo.URL(), stackConfig("content", "x", "recordName", "pinned-record"))
	ws.Spec.Git.Ref = shaA
	if err := cp.Client.Create(ctx, ws); err != nil {
		t.Fatal(err)
	}
	waitWorkspaceReady(t, ws, 2*time.Minute)
	pid := agentPID(t, e, "pinned")
	at := func(name, rev string) *autov1alpha1.Update {
		u := newUpdate(e.ns, name, "pinned", autov1alpha1.UpType)
		u.Annotations = map[string]string{stack.AnnotationRevision: rev}
		return runUpdate(t, u, 2*time.Minute)
	}
	aborted := func(u *autov1alpha1.Update, wsRev, rev string) {
		t.Helper()
		if reason(u) != autov1alpha1.UpdateReasonAborted || !strings.Contains(u.Status.Message, "set to commit "+wsRev+", not this update's "+rev) {
			t.Fatalf("update for %s in a workspace at %s: %s %q; want Aborted, not started", rev, wsRev, reason(u), u.Status.Message)
		}
	}

	aborted(at("for-b", shaB), shaA, shaB)
	if _, ok := e.pe.Record(t, "pinned-record"); ok {
		t.Fatal("the aborted update ran")
	}
	if u := at("for-a", shaA); !succeeded(u) {
		t.Fatalf("update at the workspace's commit: %s %q", reason(u), u.Status.Message)
	}
	if got, _ := e.pe.Record(t, "pinned-record"); got != "x" {
		t.Fatalf("record at A = %q", got)
	}

	mutate(t, ws, func() { ws.Spec.Git.Ref = shaB })
	waitWorkspaceReady(t, ws, 2*time.Minute)
	if got := agentPID(t, e, "pinned"); got != pid {
		t.Fatalf("the agent was replaced for a new commit (pid %d → %d)", pid, got)
	}
	if c := apimeta.FindStatusCondition(ws.Status.Conditions, autov1alpha1.WorkspaceReady); !strings.Contains(c.Message, "revision "+shaB) {
		t.Fatalf("Workspace Ready = %q, want revision %s", c.Message, shaB)
	}
	aborted(at("for-a-again", shaA), shaB, shaA)
	if u := at("for-b-now", shaB); !succeeded(u) {
		t.Fatalf("update at the new commit: %s %q", reason(u), u.Status.Message)
	}
	if got, _ := e.pe.Record(t, "pinned-record"); got != "b-x" {
		t.Fatalf("record at B = %q", got)
	}
}
