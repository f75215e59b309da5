package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

// stackProgram reads structured configuration and a secret, and writes a
// record named by configuration.
const stackProgram = `name: stacks
runtime: yaml
config:
  recordName:
    type: string
  content:
    type: string
  settings:
    default: {}
  password:
    type: string
    default: none
  failOn:
    type: string
    default: ""
resources:
  rec:
    type: stackflowtest:index:Record
    properties:
      name: ${recordName}
      content: ${content}
      failOn: ${failOn}
outputs:
  content: ${rec.content}
  settings: ${settings}
  password: ${password}
`

func newStack(ns, name string, spec pulumiv1.StackSpec) *pulumiv1.Stack {
	return &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

func cfg(kv ...any) map[string]apiextensionsv1.JSON {
	m := map[string]apiextensionsv1.JSON{}
	for i := 0; i+1 < len(kv); i += 2 {
		b, _ := json.Marshal(kv[i+1])
		m[kv[i].(string)] = apiextensionsv1.JSON{Raw: b}
	}
	return m
}

func gitSpec(url, branch, commit string) *pulumiv1.GitSource {
	return &pulumiv1.GitSource{ProjectRepo: url, Branch: branch, Commit: commit}
}

// mutateStack changes a Stack's spec, retrying when the operator's status
// patches got in between.
func mutateStack(t *testing.T, s *pulumiv1.Stack, change func(*pulumiv1.Stack)) {
	t.Helper()
	mutate(t, s, func() { change(s) })
}

// mutate reads obj, applies change and updates it, retrying on conflicts with
// the operator's status patches.
func mutate(t testing.TB, obj client.Object, change func()) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := get(t, obj); err != nil {
			return err
		}
		change()
		return cp.Client.Update(context.Background(), obj)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// stackEnv starts an operator whose Stacks re-resolve branches every second.
func stackEnv(t *testing.T) (*env, *gitrepo.Repo) {
	t.Helper()
	e := newEnv(t)
	e.opts.StackResyncOverride = time.Second
	startOperator(t, e.opts)
	repo := gitrepo.New(t)
	return e, repo
}

func condition(s *pulumiv1.Stack, typ string) *metav1.Condition {
	return apimeta.FindStatusCondition(s.Status.Conditions, typ)
}

// waitStack waits until cond holds for the Stack, reporting its conditions on
// timeout.
func waitStack(t *testing.T, s *pulumiv1.Stack, timeout time.Duration, what string, cond func(*pulumiv1.Stack) bool) {
	t.Helper()
	eventually(t, timeout, s.Name+" "+what, func() (bool, error) {
		if err := get(t, s); err != nil {
			return false, err
		}
		b, _ := json.Marshal(s.Status.Conditions)
		return cond(s), fmt.Errorf("conditions %s", b)
	})
}

func readyAt(rev string) func(*pulumiv1.Stack) bool {
	return func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.ReadyCondition)
		return c != nil && c.Status == metav1.ConditionTrue && s.Status.LastUpdate != nil &&
			s.Status.LastUpdate.LastSuccessfulCommit == rev && s.Status.ObservedGeneration == s.Generation
	}
}

// TestStackTracksBranch: a Stack on a branch deploys its head, then a pushed
// commit within a resync interval, checked out in place by the same agent
// process; structured config reaches the program.
func TestStackTracksBranch(t *testing.T) {
	e, repo := stackEnv(t)
	sha1 := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})
	s := newStack(e.ns, "tracker", pulumiv1.StackSpec{Stack: "tracker", GitSource: gitSpec(repo.URL(), "main", ""),
		Config: cfg("recordName", "tracker", "content", "one", "settings", map[string]any{"replicas": 3, "zones": []string{"a", "b"}, "debug": true})})
	if err := cp.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitStack(t, s, 3*time.Minute, "ready at the first commit", readyAt(sha1))
	if got, _ := e.pe.Record(t, "tracker"); got != "one" {
		t.Fatalf("record = %q", got)
	}
	var settings map[string]any
	if err := json.Unmarshal(s.Status.Outputs["settings"].Raw, &settings); err != nil || settings["replicas"] != 3.0 || settings["debug"] != true {
		t.Fatalf("structured config output = %s (%v)", s.Status.Outputs["settings"].Raw, err)
	}
	if s.Status.LastUpdate.Type != "up" || s.Status.LastUpdate.State != pulumiv1.SucceededStackStateMessage {
		t.Fatalf("lastUpdate = %+v", s.Status.LastUpdate)
	}

	pid := agentPID(t, e, "tracker")
	program2 := strings.Replace(stackProgram, "content: ${content}", "content: pushed-${content}", 1)
	sha2 := repo.Commit(t, "v2", map[string]string{"Pulumi.yaml": program2})
	waitStack(t, s, 2*time.Minute, "ready at the pushed commit", readyAt(sha2))
	if got, _ := e.pe.Record(t, "tracker"); got != "pushed-one" {
		t.Fatalf("record after push = %q", got)
	}
	// The running agent checked the commit out in place.
	if got := agentPID(t, e, "tracker"); got != pid {
		t.Fatalf("agent process replaced for a new commit: pid %d, was %d", got, pid)
	}
	if h := stackHistory(t, e, repo, "tracker")[0]; h.Environment["git.head"] != sha2 {
		t.Fatalf("backend recorded git.head %s, want %s", h.Environment["git.head"], sha2)
	}
}

// TestStagedRollout: dev tracks a branch, test and prod pin commits with
// prerequisites; prod never starts before test succeeded; preview mode leaves
// the state untouched until it is turned off.
func TestStagedRollout(t *testing.T) {
	e, repo := stackEnv(t)
	ctx := context.Background()
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})
	hour := &metav1.Duration{Duration: time.Hour}
	prod := newStack(e.ns, "prod", pulumiv1.StackSpec{Stack: "prod", GitSource: gitSpec(repo.URL(), "", sha), Preview: true,
		Config:        cfg("recordName", "prod", "content", "prod-content"),
		Prerequisites: []pulumiv1.PrerequisiteRef{{Name: "test", Requirement: &pulumiv1.RequirementSpec{SucceededWithinDuration: hour}}}})
	test := newStack(e.ns, "test", pulumiv1.StackSpec{Stack: "test", GitSource: gitSpec(repo.URL(), "", sha),
		Config:        cfg("recordName", "test", "content", "test-content"),
		Prerequisites: []pulumiv1.PrerequisiteRef{{Name: "dev", Requirement: &pulumiv1.RequirementSpec{SucceededWithinDuration: hour}}}})
	dev := newStack(e.ns, "dev", pulumiv1.StackSpec{Stack: "dev", GitSource: gitSpec(repo.URL(), "main", ""),
		Config: cfg("recordName", "dev", "content", "dev-content")})
	// Created in reverse order: prod and test must wait.
	for _, s := range []*pulumiv1.Stack{prod, test} {
		if err := cp.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	waitStack(t, test, time.Minute, "waiting for dev", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.ReconcilingCondition)
		return c != nil && c.Reason == pulumiv1.ReconcilingPrerequisiteNotSatisfiedReason && strings.Contains(c.Message, "prerequisite dev not found")
	})
	if err := cp.Client.Create(ctx, dev); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*pulumiv1.Stack{dev, test} {
		waitStack(t, s, 3*time.Minute, "ready", readyAt(sha))
	}
	waitStack(t, prod, 3*time.Minute, "previewed", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.ReadyCondition)
		return c != nil && c.Status == metav1.ConditionTrue && s.Status.LastUpdate != nil && s.Status.LastUpdate.Type == "preview"
	})
	if !test.Status.LastUpdate.LastResyncTime.Before(&prod.Status.LastUpdate.LastResyncTime) {
		t.Fatalf("prod ran before test succeeded: test %v, prod %v", test.Status.LastUpdate.LastResyncTime, prod.Status.LastUpdate.LastResyncTime)
	}
	if _, ok := e.pe.Record(t, "prod"); ok {
		t.Fatal("a preview-mode stack changed infrastructure")
	}
	if prod.Status.LastUpdate.LastSuccessfulCommit != "" {
		t.Fatalf("a preview recorded a successful deployment: %+v", prod.Status.LastUpdate)
	}
	if h := stackHistory(t, e, repo, "prod"); len(h) != 0 {
		t.Fatalf("previews wrote %d entries to the backend history", len(h))
	}

	// Turning preview off deploys the commit.
	mutateStack(t, prod, func(s *pulumiv1.Stack) { s.Spec.Preview = false })
	waitStack(t, prod, 3*time.Minute, "deployed", readyAt(sha))
	if got, _ := e.pe.Record(t, "prod"); got != "prod-content" {
		t.Fatalf("prod record = %q", got)
	}
}

// TestStackFailureRetriesThenStalls: a failing program is retried with
// backoff, shows Stalled after the limit with the count in the message, is
// still retried at the backoff cap meanwhile, and a fixed spec recovers it.
func TestStackFailureRetriesThenStalls(t *testing.T) {
	e, repo := stackEnv(t)
	ctx := context.Background()
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})
	s := newStack(e.ns, "flaky", pulumiv1.StackSpec{Stack: "flaky", GitSource: gitSpec(repo.URL(), "", sha),
		RetryMaxBackoffDurationSeconds: 1,
		Config:                         cfg("recordName", "flaky", "content", "x", "failOn", "create")})
	if err := cp.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	waitStack(t, s, 2*time.Minute, "retrying", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.ReconcilingCondition)
		return c != nil && c.Reason == pulumiv1.ReconcilingRetryReason
	})
	waitStack(t, s, 4*time.Minute, "stalled", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.StalledCondition)
		return c != nil && c.Reason == pulumiv1.StalledUpdateFailedReason
	})
	msg := condition(s, pulumiv1.StalledCondition).Message
	if !regexp.MustCompile(`failed [5-9] times in a row`).MatchString(msg) || !strings.Contains(msg, "failOn=create: create refused") {
		t.Fatalf("stalled message = %q", msg)
	}
	// Stalled, but still retried at the backoff cap (1 s here), so an outage
	// outside the Stack heals by itself.
	waitStack(t, s, 2*time.Minute, "retried at the backoff cap", func(s *pulumiv1.Stack) bool {
		return s.Status.LastUpdate != nil && s.Status.LastUpdate.Failures >= 7
	})

	mutateStack(t, s, func(s *pulumiv1.Stack) { s.Spec.Config = cfg("recordName", "flaky", "content", "fixed") })
	waitStack(t, s, 2*time.Minute, "recovered", readyAt(sha))
	if s.Status.LastUpdate.Failures != 0 || condition(s, pulumiv1.StalledCondition) != nil {
		t.Fatalf("recovered stack status = %+v", s.Status)
	}
	if got, _ := e.pe.Record(t, "flaky"); got != "fixed" {
		t.Fatalf("record = %q", got)
	}
}

// TestStackReferencesAndSecrets: configRef (json) and secretsRef reach the
// program; a missing ConfigMap stalls the Stack naming it, and creating it
// recovers; the secret value appears in no status field or event.
func TestStackReferencesAndSecrets(t *testing.T) {
	e, repo := stackEnv(t)
	ctx := context.Background()
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})
	const password = "s3cr3t-p4ssw0rd-value"
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "db"}, StringData: map[string]string{"password": password}}
	if err := cp.Client.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	yes := true
	s := newStack(e.ns, "refs", pulumiv1.StackSpec{Stack: "refs", GitSource: gitSpec(repo.URL(), "", sha),
		Config:    cfg("recordName", "refs", "content", "some-content"),
		ConfigRef: map[string]pulumiv1.ConfigMapRef{"settings": {Name: "app-settings", Key: "settings", JSON: &yes}},
		SecretRefs: map[string]pulumiv1.ResourceRef{"password": {SelectorType: pulumiv1.ResourceSelectorSecret,
			ResourceSelector: pulumiv1.ResourceSelector{SecretRef: &pulumiv1.SecretSelector{Name: "db", Key: "password"}}}},
	})
	if err := cp.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	waitStack(t, s, time.Minute, "stalled on the missing configmap", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.StalledCondition)
		return c != nil && c.Reason == pulumiv1.StalledSourceUnavailableReason && strings.Contains(c.Message, "configmap app-settings not found")
	})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "app-settings"},
		Data: map[string]string{"settings": `{"tier": "gold", "limits": [1, 2]}`}}
	if err := cp.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	// No nudge: the ConfigMap's creation wakes the Stack.
	waitStack(t, s, 3*time.Minute, "ready", readyAt(sha))
	var settings map[string]any
	if err := json.Unmarshal(s.Status.Outputs["settings"].Raw, &settings); err != nil || settings["tier"] != "gold" {
		t.Fatalf("configRef json output = %s", s.Status.Outputs["settings"].Raw)
	}
	if got := string(s.Status.Outputs["password"].Raw); got != `"[secret]"` {
		t.Fatalf("secret output shown as %s", got)
	}
	all, _ := json.Marshal(s)
	var events corev1.EventList
	_ = cp.Client.List(ctx, &events, client.InNamespace(e.ns))
	evs, _ := json.Marshal(events)
	var updates autoUpdateList
	_ = cp.Client.List(ctx, &updates.UpdateList, client.InNamespace(e.ns))
	ups, _ := json.Marshal(updates)
	logs, _ := filepath.Glob(filepath.Join(e.opts.LocalRoot, "*", "*", "agent.log"))
	if len(logs) == 0 {
		t.Fatal("no agent log to search")
	}
	texts := map[string][]byte{"stack": all, "events": evs, "updates": ups}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		texts[l] = b
	}
	for what, text := range texts {
		if strings.Contains(string(text), password) {
			t.Fatalf("the secret value appears in %s", what)
		}
	}
}

// TestStackDestroyOnFinalize: deleting a Stack with destroyOnFinalize destroys
// its resources; deleting one whose prerequisite is missing completes.
func TestStackDestroyOnFinalize(t *testing.T) {
	e, repo := stackEnv(t)
	ctx := context.Background()
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})
	s := newStack(e.ns, "doomed", pulumiv1.StackSpec{Stack: "doomed", GitSource: gitSpec(repo.URL(), "", sha), DestroyOnFinalize: true,
		Config: cfg("recordName", "doomed", "content", "some-content")})
	orphan := newStack(e.ns, "orphan", pulumiv1.StackSpec{Stack: "orphan", GitSource: gitSpec(repo.URL(), "", sha),
		Config: cfg("recordName", "orphan", "content", "some-content"), Prerequisites: []pulumiv1.PrerequisiteRef{{Name: "never-created"}}})
	for _, o := range []*pulumiv1.Stack{s, orphan} {
		if err := cp.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	waitStack(t, s, 3*time.Minute, "ready", readyAt(sha))
	if _, ok := e.pe.Record(t, "doomed"); !ok {
		t.Fatal("record not created")
	}
	waitStack(t, orphan, time.Minute, "waiting for its prerequisite", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.ReconcilingCondition)
		return c != nil && c.Reason == pulumiv1.ReconcilingPrerequisiteNotSatisfiedReason
	})
	for _, o := range []*pulumiv1.Stack{s, orphan} {
		if err := cp.Client.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range []*pulumiv1.Stack{s, orphan} {
		eventually(t, 3*time.Minute, o.Name+" deleted", func() (bool, error) {
			err := get(t, o)
			return err != nil && strings.Contains(err.Error(), "not found"), err
		})
	}
	if _, ok := e.pe.Record(t, "doomed"); ok {
		t.Fatal("destroyOnFinalize left the record")
	}
}

// TestStackFromProgram: a Stack referring to a Program deploys the Program's
// artifact, and editing the Program redeploys.
func TestStackFromProgram(t *testing.T) {
	e, _ := stackEnv(t)
	ctx := context.Background()
	program := func(content string) pulumiv1.ProgramSpec {
		raw := func(v any) pulumiv1.Expression { b, _ := json.Marshal(v); return pulumiv1.Expression{Raw: b} }
		return pulumiv1.ProgramSpec{
			Resources: map[string]pulumiv1.Resource{"rec": {Type: "stackflowtest:index:Record",
				Properties: map[string]pulumiv1.Expression{"name": raw("from-program"), "content": raw(content)}}},
			Outputs: map[string]pulumiv1.Expression{"content": raw("${rec.content}")},
		}
	}
	p := &pulumiv1.Program{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "prog"}, Program: program("first")}
	if err := cp.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	s := newStack(e.ns, "from-program", pulumiv1.StackSpec{Stack: "from-program", ProgramRef: &pulumiv1.ProgramReference{Name: "prog"}})
	if err := cp.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	ready := func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.ReadyCondition)
		return c != nil && c.Status == metav1.ConditionTrue && s.Status.LastUpdate != nil && s.Status.LastUpdate.LastSuccessfulCommit != ""
	}
	waitStack(t, s, 3*time.Minute, "ready", ready)
	first := s.Status.LastUpdate.LastSuccessfulCommit
	if got, _ := e.pe.Record(t, "from-program"); got != "first" {
		t.Fatalf("record = %q", got)
	}
	mutate(t, p, func() { p.Program = program("second") })
	waitStack(t, s, 3*time.Minute, "redeployed", func(s *pulumiv1.Stack) bool {
		return ready(s) && s.Status.LastUpdate.LastSuccessfulCommit != first
	})
	if got, _ := e.pe.Record(t, "from-program"); got != "second" {
		t.Fatalf("record after editing the Program = %q", got)
	}
	if !strings.HasPrefix(s.Status.LastUpdate.LastSuccessfulCommit, "2/sha256:") {
		t.Fatalf("revision = %q, want generation 2's digest", s.Status.LastUpdate.LastSuccessfulCommit)
	}
}

// TestStackPinnedCommitAndStalePrerequisite: advancing spec.commit deploys
// exactly that commit (the backend's history records it); a dependent whose
// prerequisite succeeded longer ago than required asks it to re-sync and runs
// after it.
func TestStackPinnedCommitAndStalePrerequisite(t *testing.T) {
	e, repo := stackEnv(t)
	ctx := context.Background()
	sha1 := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})
	sha2 := repo.Commit(t, "v2", map[string]string{"Pulumi.yaml": strings.Replace(stackProgram, "content: ${content}", "content: v2-${content}", 1)})
	base := newStack(e.ns, "base", pulumiv1.StackSpec{Stack: "base", GitSource: gitSpec(repo.URL(), "", sha1),
		WorkspaceReclaimPolicy: pulumiv1.WorkspaceReclaimDelete,
		Config:                 cfg("recordName", "base", "content", "pinned")})
	if err := cp.Client.Create(ctx, base); err != nil {
		t.Fatal(err)
	}
	waitStack(t, base, 3*time.Minute, "ready at the first commit", readyAt(sha1))
	if got, _ := e.pe.Record(t, "base"); got != "pinned" {
		t.Fatalf("record at %s = %q", sha1, got)
	}
	// workspaceReclaimPolicy Delete: the workspace goes once the stack is up
	// to date, and comes back for the next update.
	eventually(t, time.Minute, "the reclaimed workspace to be deleted", func() (bool, error) {
		err := get(t, &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "base"}})
		return err != nil && strings.Contains(err.Error(), "not found"), err
	})
	mutateStack(t, base, func(s *pulumiv1.Stack) { s.Spec.Commit = sha2 })
	waitStack(t, base, 3*time.Minute, "ready at the advanced commit", readyAt(sha2))
	if got, _ := e.pe.Record(t, "base"); got != "v2-pinned" {
		t.Fatalf("record at %s = %q", sha2, got)
	}
	if h := stackHistory(t, e, repo, "base")[0]; h.Environment["git.head"] != sha2 {
		t.Fatalf("backend recorded git.head %s, want %s", h.Environment["git.head"], sha2)
	}

	// base last succeeded more than 2s ago by now: the dependent asks it to
	// re-sync and waits for it.
	time.Sleep(3 * time.Second)
	firstSuccess := base.Status.LastUpdate.LastResyncTime
	dep := newStack(e.ns, "dependent", pulumiv1.StackSpec{Stack: "dependent", GitSource: gitSpec(repo.URL(), "", sha2),
		Config:        cfg("recordName", "dependent", "content", "after-base"),
		Prerequisites: []pulumiv1.PrerequisiteRef{{Name: "base", Requirement: &pulumiv1.RequirementSpec{SucceededWithinDuration: &metav1.Duration{Duration: 2 * time.Second}}}}})
	if err := cp.Client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	waitStack(t, dep, 3*time.Minute, "ready", readyAt(sha2))
	if err := get(t, base); err != nil {
		t.Fatal(err)
	}
	req := base.Annotations[pulumiv1.ReconcileRequestAnnotation]
	if req == "" || base.Status.LastUpdate.ReconcileRequest != req || !firstSuccess.Before(&base.Status.LastUpdate.LastResyncTime) {
		t.Fatalf("the stale prerequisite was not re-synced: annotation %q, lastUpdate %+v", req, base.Status.LastUpdate)
	}
	if !base.Status.LastUpdate.LastResyncTime.Before(&dep.Status.LastUpdate.LastResyncTime) && !base.Status.LastUpdate.LastResyncTime.Equal(&dep.Status.LastUpdate.LastResyncTime) {
		t.Fatalf("the dependent ran before its prerequisite re-synced")
	}
}
