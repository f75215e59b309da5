package secrets

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/gitremote"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/local"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/hostile"
	"github.com/stackflow-io/stackflow/test/framework/leaks"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestProjectRepoCredentialsNeverLeak: a token in the user info of
// spec.projectRepo (https://x-access-token:<token>@host/…, as GitHub
// documents it) shows in no status, event, operator or agent log line or
// metric, on any path a Stack can take with it: deployed, the token refused,
// the repository or branch missing, the server refusing connections or never
// answering, a pinned commit the workspace cannot fetch, a URL that does not
// parse. Before, the raw URL went into the Stack's conditions (and from there
// into Warning events) on every failure to resolve its branch.
func TestProjectRepoCredentialsNeverLeak(t *testing.T) {
	ctx := context.Background()
	pe := substrate.NewPulumi(t)
	root := t.TempDir()
	t.Cleanup(func() { local.StopAll(root) })
	operatortest.StartOperator(t, cp.Config, operator.Options{
		Runtime: operator.RuntimeLocal, LocalRoot: root, AgentBinary: agentBin,
		PulumiRoot: pe.Paths.PulumiRoot, AgentEnv: pe.EnvVars(), WorkspaceWorkers: 4, UpdateWorkers: 4,
		ArtifactDir: t.TempDir(), StackResyncOverride: time.Second,
		GitListLimits: gitremote.Limits{Timeout: 5 * time.Second, IdleTimeout: 2 * time.Second, MaxBytes: 1 << 20},
	})
	ns := cp.Namespace(t)

	token, wrong := randomString(t, 40), randomString(t, 40)
	repoRoot := t.TempDir()
	repo := gitrepo.NewIn(t, repoRoot, "program.git")
	repo.Commit(t, "program", map[string]string{"Pulumi.yaml": "name: projectrepo\nruntime: yaml\noutputs:\n  answer: 42\n"})
	served := serveGit(t, repoRoot, token)
	silent := hostile.HTTP(t, hostile.Silent, false)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String()
	l.Close()
	with := func(tok, base, path string) string {
		return strings.Replace(base, "://", "://x-access-token:"+tok+"@", 1) + path
	}

	ready := func(s *pulumiv1.Stack) bool {
		return s.Status.LastUpdate != nil && s.Status.LastUpdate.State == pulumiv1.SucceededStackStateMessage
	}
	condition := func(typ, reason, text string) func(*pulumiv1.Stack) bool {
		return func(s *pulumiv1.Stack) bool {
			c := apimeta.FindStatusCondition(s.Status.Conditions, typ)
			return c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason && strings.Contains(c.Message, text)
		}
	}
	cases := []struct {
		name, url, branch, commit string
		want                      func(*pulumiv1.Stack) bool
	}{
		{name: "deploys", url: with(token, served, "/program.git"), branch: "main", want: ready},
		{name: "token-refused", url: with(wrong, served, "/program.git"), branch: "main",
			want: condition(pulumiv1.StalledCondition, pulumiv1.StalledSourceUnavailableReason, "authentication required")},
		{name: "repo-missing", url: with(token, served, "/missing.git"), branch: "main",
			want: condition(pulumiv1.StalledCondition, pulumiv1.StalledSourceUnavailableReason, "repository not found")},
		{name: "branch-missing", url: with(token, served, "/program.git"), branch: "nope",
			want: condition(pulumiv1.StalledCondition, pulumiv1.StalledSourceUnavailableReason, "branch nope not found")},
		{name: "refused", url: with(token, refused, "/program.git"), branch: "main",
			want: condition(pulumiv1.ReconcilingCondition, pulumiv1.ReconcilingSourceUnreachableReason, "connection refused")},
		{name: "silent", url: with(token, "http://"+silent.Addr, "/program.git"), branch: "main",
			want: condition(pulumiv1.ReconcilingCondition, pulumiv1.ReconcilingSourceUnreachableReason, "sent nothing for 2s")},
		{name: "commit-missing", url: with(token, served, "/program.git"), commit: strings.Repeat("ab", 20),
			want: condition(pulumiv1.StalledCondition, pulumiv1.StalledSourceUnavailableReason, "commit "+strings.Repeat("ab", 20)+" not found")},
		{name: "url-invalid", url: "http://x-access-token:" + token + "@127.0.0.1:port/program.git", branch: "main",
			want: condition(pulumiv1.StalledCondition, pulumiv1.StalledSourceUnavailableReason, "invalid git URL")},
	}
	var stacks []*pulumiv1.Stack
	for _, c := range cases {
		s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.name}, Spec: pulumiv1.StackSpec{
			Stack: c.name, GitSource: &pulumiv1.GitSource{ProjectRepo: c.url, Branch: c.branch, Commit: c.commit}}}
		if err := cp.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		stacks = append(stacks, s)
	}
	for i, c := range cases {
		waitStack(t, stacks[i], 3*time.Minute, c.name, c.want)
	}

	texts := map[string]string{"operator log": operatorLog.String()}
	for _, s := range stacks {
		b, _ := json.Marshal(s.Status)
		texts["stack "+s.Name] = string(b)
		if b, err := os.ReadFile(filepath.Join(root, ns, s.Name, "agent.log")); err == nil {
			texts["agent log "+s.Name] = string(b)
		}
	}
	var wss autov1alpha1.WorkspaceList
	var updates autov1alpha1.UpdateList
	var events corev1.EventList
	for _, list := range []client.ObjectList{&wss, &updates, &events} {
		if err := cp.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
	}
	for _, ws := range wss.Items {
		b, _ := json.Marshal(ws.Status)
		texts["workspace "+ws.Name] = string(b)
	}
	for _, u := range updates.Items {
		b, _ := json.Marshal(u.Status)
		texts["update "+u.Name] = string(b)
	}
	b, _ := json.Marshal(events)
	texts["events"] = string(b)
	if len(events.Items) == 0 || len(updates.Items) == 0 {
		t.Fatalf("%d events and %d updates: the sweep would search nothing", len(events.Items), len(updates.Items))
	}
	texts["metrics"] = gatherMetrics(t)
	leaks.AssertNone(t, []string{token, wrong}, texts)
}

// gatherMetrics is the text of every metric the operator registers.
func gatherMetrics(t *testing.T) string {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, f := range families {
		if _, err := expfmt.MetricFamilyToText(&buf, f); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(buf.String(), "stackflow_git_remote_queries_total") {
		t.Fatal("the operator's metrics are not in the registry gathered")
	}
	return fmt.Sprint(buf.String())
}
