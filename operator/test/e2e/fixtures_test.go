package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-cd/v2/util/lua"
	"github.com/google/go-cmp/cmp"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	argocdhealth "github.com/stackflow-io/stackflow/argocd-health"
	"github.com/stackflow-io/stackflow/internal/revision"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// fixtureProgram writes one record; sleep delays its create and update (and
// comes before failOn), so running updates last long enough to be seen.
const fixtureProgram = `name: fixtures
runtime: yaml
config:
  recordName:
    type: string
  content:
    type: string
  failOn:
    type: string
    default: ""
  sleep:
    type: integer
    default: 0
resources:
  rec:
    type: stackflowtest:index:Record
    properties:
      name: ${recordName}
      content: ${content}
      failOn: ${failOn}
      sleepSeconds: ${sleep}
outputs:
  content: ${rec.content}
`

// Placeholders for what changes from run to run.
const (
	fixtureSHA     = "5f3c2a1b9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a"
	fixtureTime    = "2025-01-01T00:00:00Z"
	fixtureUID     = "11111111-2222-3333-4444-555555555555"
	fixtureNS      = "stackflow"
	fixtureRepo    = "file:///git/fixtures.git"
	fixtureAddress = "127.0.0.1:30000"
)

// TestCaptureHealthFixtures runs the operator through the states the Argo CD
// health checks (argocd-health) tell apart and records each object, with what
// varies between runs replaced by placeholders, in
// argocd-health/testdata/captured. With STACKFLOW_UPDATE_FIXTURES=1 it writes
// the files; otherwise it fails when they differ from this run (SHAs and
// durations masked). It also runs the Stack actions as Argo CD does (Lua, then
// a JSON merge patch) against the API server and checks the operator acts on
// them.
func TestCaptureHealthFixtures(t *testing.T) {
	e := newEnv(t)
	e.opts.StackResyncOverride = time.Second
	stopOperator := startOperator(t, e.opts)
	repo := gitrepo.New(t)
	sha := repo.Commit(t, "fixtures", map[string]string{"Pulumi.yaml": fixtureProgram})
	rec := newFixtureRecorder(t, e.ns, repo, sha)
	ctx := context.Background()

	git := func() *pulumiv1.GitSource { return gitSpec(repo.URL(), "", sha) }
	program := &pulumiv1.Program{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "fx-program"}, Program: pulumiv1.ProgramSpec{
		Resources: map[string]pulumiv1.Resource{"rec": {Type: "stackflowtest:index:Record", Properties: map[string]pulumiv1.Expression{
			"name": {Raw: []byte(`"fx-from-program"`)}, "content": {Raw: []byte(`"from-program"`)}}}}}}
	stacks := []*pulumiv1.Stack{
		newStack(e.ns, "deployed", pulumiv1.StackSpec{Stack: "deployed", GitSource: git(),
			Config: cfg("recordName", "fx-deployed", "content", "one", "sleep", 10)}),
		newStack(e.ns, "previewed", pulumiv1.StackSpec{Stack: "previewed", GitSource: git(), Preview: true,
			Config: cfg("recordName", "fx-previewed", "content", "one")}),
		newStack(e.ns, "retrying", pulumiv1.StackSpec{Stack: "retrying", GitSource: git(),
			Config: cfg("recordName", "fx-retrying", "content", "one", "failOn", "create", "sleep", 4)}),
		newStack(e.ns, "stalled", pulumiv1.StackSpec{Stack: "stalled", GitSource: git(), RetryMaxBackoffDurationSeconds: 1,
			Config: cfg("recordName", "fx-stalled", "content", "one", "failOn", "create")}),
		newStack(e.ns, "waiting", pulumiv1.StackSpec{Stack: "waiting", GitSource: git(),
			Config: cfg("recordName", "fx-waiting", "content", "one"), Prerequisites: []pulumiv1.PrerequisiteRef{{Name: "stalled"}}}),
		newStack(e.ns, "from-program", pulumiv1.StackSpec{Stack: "from-program", ProgramRef: &pulumiv1.ProgramReference{Name: "fx-program"}}),
		newStack(e.ns, "destroyed", pulumiv1.StackSpec{Stack: "destroyed", GitSource: git(), DestroyOnFinalize: true,
			Config: cfg("recordName", "fx-destroyed", "content", "one")}),
		newStack(e.ns, "doomed", pulumiv1.StackSpec{Stack: "doomed", GitSource: git(), DestroyOnFinalize: true,
			Config: cfg("recordName", "fx-doomed", "content", "one", "failOn", "delete")}),
		newStack(e.ns, "no-branch", pulumiv1.StackSpec{Stack: "no-branch", GitSource: gitSpec(repo.URL(), "missing", ""),
			Config: cfg("recordName", "fx-no-branch", "content", "one")}),
		newStack(e.ns, "drifted", pulumiv1.StackSpec{Stack: "drifted", GitSource: git(), DriftDetection: &pulumiv1.DriftDetection{},
			Config: cfg("recordName", "fx-drifted", "content", "one")}),
	}
	if err := cp.Client.Create(ctx, program); err != nil {
		t.Fatal(err)
	}
	for _, s := range stacks {
		if err := cp.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	// The operator's message for a running update, once the Update runs.
	runningMsg := func(s *pulumiv1.Stack, typ string) bool {
		c := condition(s, pulumiv1.ReconcilingCondition)
		cu := s.Status.CurrentUpdate
		return c != nil && cu != nil && c.Message == fmt.Sprintf("%s %s running for %s", typ, cu.Name, revision.Short(sha))
	}
	ready := func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.ReadyCondition)
		return c != nil && c.Status == metav1.ConditionTrue && s.Status.ObservedGeneration == s.Generation && s.Status.LastUpdate != nil
	}
	reconciling := func(s *pulumiv1.Stack, reason string) bool {
		c := condition(s, pulumiv1.ReconcilingCondition)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason
	}
	updateGVK := schema.GroupVersionKind{Group: "auto.pulumi.com", Version: "v1alpha1", Kind: "Update"}
	workspaceGVK := schema.GroupVersionKind{Group: "auto.pulumi.com", Version: "v1alpha1", Kind: "Workspace"}
	programGVK := schema.GroupVersionKind{Group: "pulumi.com", Version: "v1", Kind: "Program"}
	updateHas := func(name, typ string, status metav1.ConditionStatus) bool {
		u := fixtureGet(t, updateGVK, e.ns, name)
		return u != nil && fixtureConditionStatus(u, typ) == status
	}

	steps := []fixtureStep{
		{name: "stack-running", stack: "deployed", when: func(s *pulumiv1.Stack) bool {
			return runningMsg(s, "up") && updateHas(s.Status.CurrentUpdate.Name, "Progressing", metav1.ConditionTrue)
		}, do: func(u *unstructured.Unstructured, s *pulumiv1.Stack) {
			rec.capture("stack-running", u)
			rec.capture("update-running", fixtureGet(t, updateGVK, e.ns, s.Status.CurrentUpdate.Name))
		}},
		{name: "stack-succeeded", stack: "deployed", after: "stack-running", when: func(s *pulumiv1.Stack) bool {
			if !ready(s) {
				return false
			}
			ws := fixtureGet(t, workspaceGVK, e.ns, "deployed")
			return ws != nil && fixtureConditionStatus(ws, "Ready") == metav1.ConditionTrue
		}, do: func(u *unstructured.Unstructured, s *pulumiv1.Stack) {
			rec.capture("stack-succeeded", u)
			rec.capture("update-succeeded", fixtureRecordedUpdate(t, e.ns, s.Status.LastUpdate.Name))
			rec.capture("workspace-ready", fixtureGet(t, workspaceGVK, e.ns, "deployed"))
		}},
		{name: "stack-preview-succeeded", stack: "previewed", when: ready, do: rec.captureAs("stack-preview-succeeded")},
		{name: "stack-retrying", stack: "retrying", when: func(s *pulumiv1.Stack) bool {
			return reconciling(s, pulumiv1.ReconcilingRetryReason) && s.Status.LastUpdate != nil && s.Status.LastUpdate.Failures == 1
		}, do: func(u *unstructured.Unstructured, s *pulumiv1.Stack) {
			rec.capture("stack-retrying", u)
			rec.capture("update-failed", fixtureRecordedUpdate(t, e.ns, s.Status.LastUpdate.Name))
		}},
		{name: "stack-retry-running", stack: "retrying", after: "stack-retrying", when: func(s *pulumiv1.Stack) bool {
			return runningMsg(s, "up") && s.Status.LastUpdate.Failures == 1
		}, do: rec.captureAs("stack-retry-running")},
		{name: "stack-stalled", stack: "stalled", when: func(s *pulumiv1.Stack) bool {
			c := condition(s, pulumiv1.StalledCondition)
			return c != nil && c.Reason == pulumiv1.StalledUpdateFailedReason
		}, do: rec.captureAs("stack-stalled")},
		{name: "stack-waiting-prerequisite", stack: "waiting", when: func(s *pulumiv1.Stack) bool {
			c := condition(s, pulumiv1.ReconcilingCondition)
			return reconciling(s, pulumiv1.ReconcilingPrerequisiteNotSatisfiedReason) && c.Message == "prerequisite stalled's last update failed"
		}, do: rec.captureAs("stack-waiting-prerequisite")},
		{name: "stack-succeeded-program", stack: "from-program", when: ready, do: func(u *unstructured.Unstructured, _ *pulumiv1.Stack) {
			rec.capture("stack-succeeded-program", u)
			rec.capture("program-ready", fixtureGet(t, programGVK, e.ns, "fx-program"))
		}},
		{name: "stack-stalled-source", stack: "no-branch", when: func(s *pulumiv1.Stack) bool {
			c := condition(s, pulumiv1.StalledCondition)
			return c != nil && c.Reason == pulumiv1.StalledSourceUnavailableReason
		}, do: rec.captureAs("stack-stalled-source")},
		// A drift check in flight leaves the Stack Ready (it changes nothing).
		{name: "stack-drift-check-running", stack: "drifted", when: func(s *pulumiv1.Stack) bool {
			return ready(s) && s.Status.CurrentUpdate != nil && s.Status.CurrentUpdate.Purpose == pulumiv1.UpdatePurposeDriftCheck
		}, do: rec.captureAs("stack-drift-check-running")},
		// Its record edited out of band: the next drift check reports it.
		{name: "tamper drifted", stack: "drifted", after: "stack-drift-check-running", when: ready, do: func(*unstructured.Unstructured, *pulumiv1.Stack) {
			if err := os.WriteFile(filepath.Join(e.pe.RecordsDir, "fx-drifted"), []byte("tampered"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "stack-drift-detected", stack: "drifted", after: "tamper drifted", when: func(s *pulumiv1.Stack) bool {
			c := condition(s, pulumiv1.DriftDetectedCondition)
			return c != nil && c.Status == metav1.ConditionTrue && s.Status.DriftCheck != nil && s.Status.CurrentUpdate == nil
		}, do: rec.captureAs("stack-drift-detected")},
		// Deleted while its second up runs: the up finishes, then the destroy
		// runs. (Deleted during its first update, a Stack has no lastUpdate and
		// the operator removes it without a destroy.)
		{name: "slow up destroyed", stack: "destroyed", when: ready, do: func(_ *unstructured.Unstructured, s *pulumiv1.Stack) {
			mutateStack(t, s, func(s *pulumiv1.Stack) {
				s.Spec.Config = cfg("recordName", "fx-destroyed", "content", "two", "sleep", 20)
			})
		}},
		{name: "delete destroyed", stack: "destroyed", after: "slow up destroyed", when: func(s *pulumiv1.Stack) bool {
			return s.Status.CurrentUpdate != nil && s.Status.CurrentUpdate.Generation == 2
		}, do: func(_ *unstructured.Unstructured, s *pulumiv1.Stack) { fixtureDelete(t, s) }},
		{name: "stack-deleting-update-running", stack: "destroyed", after: "delete destroyed", when: func(s *pulumiv1.Stack) bool {
			// Once the operator has seen the deletion (generation 3).
			c := condition(s, pulumiv1.ReconcilingCondition)
			return s.DeletionTimestamp != nil && runningMsg(s, "up") && c.ObservedGeneration == s.Generation
		}, do: rec.captureAs("stack-deleting-update-running")},
		{name: "stack-deleting-destroy-running", stack: "destroyed", after: "stack-deleting-update-running", when: func(s *pulumiv1.Stack) bool {
			return s.DeletionTimestamp != nil && reconciling(s, pulumiv1.ReconcilingDeletingReason) && s.Status.CurrentUpdate != nil &&
				s.Status.CurrentUpdate.Purpose == pulumiv1.UpdatePurposeDestroy
		}, do: rec.captureAs("stack-deleting-destroy-running")},
		{name: "destroyed gone", stack: "destroyed", after: "stack-deleting-destroy-running", gone: true},
		// Deleted after it deployed a record its provider refuses to delete.
		{name: "delete doomed", stack: "doomed", when: ready, do: func(_ *unstructured.Unstructured, s *pulumiv1.Stack) { fixtureDelete(t, s) }},
		{name: "stack-deleting-destroy-failed", stack: "doomed", after: "delete doomed", when: func(s *pulumiv1.Stack) bool {
			c := condition(s, pulumiv1.StalledCondition)
			return s.DeletionTimestamp != nil && c != nil && c.Reason == pulumiv1.StalledDestroyFailedReason
		}, do: func(u *unstructured.Unstructured, s *pulumiv1.Stack) {
			rec.capture("stack-deleting-destroy-failed", u)
			// The destroy can never succeed: let the Stack go.
			mutate(t, s, func() { s.Finalizers = nil })
		}},
	}
	runFixtureSteps(t, e.ns, steps, 8*time.Minute)

	// The Stack actions, run as Argo CD runs them, reach the operator.
	runFixtureAction(t, e.ns, "stalled", "retry", `{"metadata":{"annotations":{"pulumi.com/reconciliation-request":"*"}}}`,
		func(s *pulumiv1.Stack, req string) bool {
			return s.Status.LastUpdate.ReconcileRequest == req && condition(s, pulumiv1.StalledCondition) != nil
		})
	runFixtureAction(t, e.ns, "deployed", "reconcile-now", `{"metadata":{"annotations":{"pulumi.com/reconciliation-request":"*"}}}`,
		func(s *pulumiv1.Stack, req string) bool {
			return ready(s) && s.Status.ObservedReconcileRequest == req && s.Status.LastUpdate.ReconcileRequest == req
		})
	runFixtureAction(t, e.ns, "deployed", "preview-on", `{"spec":{"preview":true}}`, func(s *pulumiv1.Stack, _ string) bool {
		return ready(s) && s.Status.LastUpdate.Type == "preview"
	})
	runFixtureAction(t, e.ns, "deployed", "preview-off", `{"spec":{"preview":false}}`, func(s *pulumiv1.Stack, _ string) bool {
		return ready(s) && s.Status.LastUpdate.Type == "up"
	})

	// With the operator stopped, what Argo CD sees right after it applied a
	// change: a new generation (of a stalled Stack) and a new reconciliation
	// request, not yet acted on. The Stack stalled on its missing branch is
	// in the same state whenever the operator stops (the one stalled on
	// failures is retried at its backoff cap every second).
	stopOperator()
	stalled := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "no-branch"}}
	mutateStack(t, stalled, func(s *pulumiv1.Stack) { s.Spec.Config = cfg("recordName", "fx-no-branch", "content", "fixed") })
	rec.capture("stack-new-generation", fixtureGet(t, fixtureStackGVK, e.ns, "no-branch"))
	// A merge patch, as kubectl or Argo CD would send: a typed update would
	// also drop spec.preview: false and bump the generation.
	deployed := fixtureGet(t, fixtureStackGVK, e.ns, "deployed")
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"2025-01-01T00:00:00Z-fixture"}}}`, pulumiv1.ReconcileRequestAnnotation)
	if err := cp.Client.Patch(ctx, deployed, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	rec.capture("stack-reconcile-requested", fixtureGet(t, fixtureStackGVK, e.ns, "deployed"))

	rec.finish()
}

var fixtureStackGVK = schema.GroupVersionKind{Group: "pulumi.com", Version: "v1", Kind: "Stack"}

// fixtureStep waits for a Stack to satisfy when, then runs do (capture or
// trigger); gone waits for the Stack to disappear.
type fixtureStep struct {
	name  string
	stack string
	after string
	when  func(*pulumiv1.Stack) bool
	do    func(*unstructured.Unstructured, *pulumiv1.Stack)
	gone  bool
}

// runFixtureSteps watches the namespace's Stacks, so that every state the
// operator writes is seen however briefly it lasts, and runs each step on the
// first state that satisfies it.
func runFixtureSteps(t *testing.T, ns string, steps []fixtureStep, timeout time.Duration) {
	t.Helper()
	wc, err := client.NewWithWatch(cp.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	startWatch := func() <-chan watch.Event {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(fixtureStackGVK.GroupVersion().WithKind("StackList"))
		w, err := wc.Watch(ctx, list, client.InNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		return w.ResultChan()
	}
	events := startWatch()
	latest := map[string]*unstructured.Unstructured{}
	done, seen := map[string]bool{}, map[string]bool{}
	evaluate := func() {
		for _, st := range steps {
			if done[st.name] || (st.after != "" && !done[st.after]) {
				continue
			}
			u, ok := latest[st.stack]
			switch {
			case st.gone:
				if !ok {
					done[st.name] = true
				}
			case !ok && seen[st.stack]:
				t.Fatalf("stack %s disappeared before %s", st.stack, st.name)
			case ok:
				seen[st.stack] = true
				if s := fixtureToStack(t, u); st.when(s) {
					st.do(u.DeepCopy(), s)
					done[st.name] = true
				}
			}
		}
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for len(done) < len(steps) {
		select {
		case ev, ok := <-events:
			if !ok {
				events = startWatch() // the server ended the watch: start again
				continue
			}
			u, isObj := ev.Object.(*unstructured.Unstructured)
			switch {
			case ev.Type == watch.Error || !isObj:
				t.Fatalf("watching stacks: %v", ev.Object)
			case ev.Type == watch.Deleted:
				delete(latest, u.GetName())
			default:
				latest[u.GetName()] = u
			}
			evaluate()
		case <-tick.C:
			// Steps may also wait on other objects (an Update, a Workspace).
			evaluate()
		case <-ctx.Done():
			var pending []string
			for _, st := range steps {
				if !done[st.name] {
					b, _ := json.Marshal(latest[st.stack])
					pending = append(pending, fmt.Sprintf("%s (stack %s: %s)", st.name, st.stack, b))
				}
			}
			t.Fatalf("timed out after %s; pending:\n%s", timeout, strings.Join(pending, "\n"))
		}
	}
}

// runFixtureAction runs a Stack action as Argo CD's API server does (the
// action's Lua on the live object, then a JSON merge patch of the difference),
// checks the patch is exactly want ("*" matches any value) and waits until
// acted(stack, annotation) holds.
func runFixtureAction(t *testing.T, ns, name, action, want string, acted func(*pulumiv1.Stack, string) bool) {
	t.Helper()
	overrides, err := argocdhealth.Overrides()
	if err != nil {
		t.Fatal(err)
	}
	vm := lua.VM{ResourceOverrides: overrides}
	var live *unstructured.Unstructured
	if action == "retry" {
		// Retry acts on a failed Stack, not on one running its retry at the
		// backoff cap: take the live object while it shows Stalled.
		eventually(t, 2*time.Minute, name+" stalled for the retry action", func() (bool, error) {
			live = fixtureGet(t, fixtureStackGVK, ns, name)
			return fixtureConditionStatus(live, pulumiv1.StalledCondition) == metav1.ConditionTrue, nil
		})
	} else {
		live = fixtureGet(t, fixtureStackGVK, ns, name)
	}
	def, err := vm.GetResourceAction(live, action)
	if err != nil {
		t.Fatal(err)
	}
	impacted, err := vm.ExecuteResourceAction(live, def.ActionLua)
	if err != nil || len(impacted) != 1 {
		t.Fatalf("action %s on %s: %v (%d objects)", action, name, err, len(impacted))
	}
	liveJSON, _ := json.Marshal(live)
	newJSON, _ := json.Marshal(impacted[0].UnstructuredObj)
	patch, err := jsonpatch.CreateMergePatch(liveJSON, newJSON)
	if err != nil {
		t.Fatal(err)
	}
	req, _, _ := unstructured.NestedString(impacted[0].UnstructuredObj.Object, "metadata", "annotations", pulumiv1.ReconcileRequestAnnotation)
	got := string(patch)
	if req != "" {
		got = strings.ReplaceAll(got, req, "*")
	}
	if got != want {
		t.Fatalf("action %s on %s patches %s, want %s", action, name, patch, want)
	}
	if err := cp.Client.Patch(context.Background(), live, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("action %s on %s: patch %s: %v", action, name, patch, err)
	}
	s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	waitStack(t, s, 3*time.Minute, "acting on "+action, func(s *pulumiv1.Stack) bool { return acted(s, req) })
}

func fixtureGet(t *testing.T, gvk schema.GroupVersionKind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := cp.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, u); err != nil {
		if strings.Contains(err.Error(), "not found") {
			return nil
		}
		t.Fatal(err)
	}
	return u
}

// fixtureRecordedUpdate returns an Update its Stack has recorded, once the
// Stack released it (removed the result finalizer right after writing the
// status that records it).
func fixtureRecordedUpdate(t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	gvk := schema.GroupVersionKind{Group: "auto.pulumi.com", Version: "v1alpha1", Kind: "Update"}
	var u *unstructured.Unstructured
	eventually(t, time.Minute, "update "+name+" released by its Stack", func() (bool, error) {
		u = fixtureGet(t, gvk, ns, name)
		return u != nil && len(u.GetFinalizers()) == 0, nil
	})
	return u
}

func fixtureDelete(t *testing.T, s *pulumiv1.Stack) {
	t.Helper()
	if err := cp.Client.Delete(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func fixtureToStack(t *testing.T, u *unstructured.Unstructured) *pulumiv1.Stack {
	t.Helper()
	s := &pulumiv1.Stack{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func fixtureConditionStatus(u *unstructured.Unstructured, typ string) metav1.ConditionStatus {
	raw, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var conds []metav1.Condition
	for _, r := range raw {
		var c metav1.Condition
		if m, ok := r.(map[string]any); ok && runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c) == nil {
			conds = append(conds, c)
		}
	}
	if c := apimeta.FindStatusCondition(conds, typ); c != nil {
		return c.Status
	}
	return ""
}

// fixtureRecorder normalizes captured objects and writes or checks them.
type fixtureRecorder struct {
	t        *testing.T
	dir      string
	update   bool
	replacer *strings.Replacer
	ns       string
	captured map[string][]byte
}

func newFixtureRecorder(t *testing.T, ns string, repo *gitrepo.Repo, shas ...string) *fixtureRecorder {
	pairs := []string{repo.URL(), fixtureRepo, repo.Bare, "/git/fixtures.git", repo.Work, "/git/work"}
	for _, s := range shas {
		pairs = append(pairs, s, fixtureSHA, revision.Short(s), revision.Short(fixtureSHA))
	}
	return &fixtureRecorder{
		t: t, dir: filepath.Join(substrate.RepoRoot(), "argocd-health", "testdata", "captured"),
		update: os.Getenv("STACKFLOW_UPDATE_FIXTURES") == "1", ns: ns,
		replacer: strings.NewReplacer(pairs...), captured: map[string][]byte{},
	}
}

var (
	fixtureTimeRE     = regexp.MustCompile(`\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})`)
	fixtureAddressRE  = regexp.MustCompile(`127\.0\.0\.1:\d+`)
	fixtureFailuresRE = regexp.MustCompile(`failed \d+ times in a row`)
	fixtureUUIDRE     = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	// Masked before comparing: abbreviated or full hashes, and durations.
	fixtureHexRE      = regexp.MustCompile(`\b[0-9a-f]{7,}\b`)
	fixtureDurationRE = regexp.MustCompile(`\b(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+\b`)
)

func (r *fixtureRecorder) captureAs(name string) func(*unstructured.Unstructured, *pulumiv1.Stack) {
	return func(u *unstructured.Unstructured, _ *pulumiv1.Stack) { r.capture(name, u) }
}

// capture normalizes obj and keeps it as name.yaml.
func (r *fixtureRecorder) capture(name string, u *unstructured.Unstructured) {
	r.t.Helper()
	if u == nil {
		r.t.Fatalf("fixture %s: object not found", name)
	}
	obj := u.DeepCopy().Object
	meta := obj["metadata"].(map[string]any)
	delete(meta, "managedFields")
	meta["uid"] = fixtureUID
	meta["resourceVersion"] = "1"
	meta["namespace"] = fixtureNS
	meta["creationTimestamp"] = fixtureTime
	if _, ok := meta["deletionTimestamp"]; ok {
		meta["deletionTimestamp"] = fixtureTime
	}
	if refs, ok := meta["ownerReferences"].([]any); ok {
		for _, ref := range refs {
			ref.(map[string]any)["uid"] = fixtureUID
		}
	}
	// How many updates ran before a state was reached depends on timing
	// (drift checks every second, retries at a 1 s cap): sequence numbers
	// are placeholders, and Update names are numbered in order of
	// appearance.
	// A Stalled Stack is retried at its 1 s backoff cap, so how many times it
	// failed past the threshold depends on timing too.
	manyFailures := false
	if st, ok := obj["status"].(map[string]any); ok {
		if lu, ok := st["lastUpdate"].(map[string]any); ok {
			if n, ok := lu["failures"].(int64); ok && n > 5 {
				lu["failures"], manyFailures = int64(5), true
			}
		}
		if _, ok := st["updateSequence"]; ok {
			st["updateSequence"] = int64(1)
		}
		if cu, ok := st["currentUpdate"].(map[string]any); ok {
			cu["number"] = int64(1)
		}
	}
	if ann, ok := meta["annotations"].(map[string]any); ok {
		if _, ok := ann["stackflow.io/update-number"]; ok {
			ann["stackflow.io/update-number"] = "1"
		}
	}
	var updates autoUpdateList
	if err := cp.Client.List(context.Background(), &updates.UpdateList, client.InNamespace(r.ns)); err != nil {
		r.t.Fatal(err)
	}
	raw, _ := json.Marshal(obj)
	type seen struct {
		name string
		at   int
	}
	var present []seen
	for _, u := range updates.Items {
		if i := strings.Index(string(raw), u.Name); i >= 0 {
			present = append(present, seen{u.Name, i})
		}
	}
	sort.Slice(present, func(i, j int) bool { return present[i].at < present[j].at })
	var pairs []string
	for i, p := range present {
		// <stack>-<number>: keep the Stack's name.
		prefix := p.name
		if j := strings.LastIndex(p.name, "-"); j > 0 {
			prefix = p.name[:j]
		}
		pairs = append(pairs, p.name, fmt.Sprintf("%s-%08x", prefix, i+1))
	}
	updateNames := strings.NewReplacer(pairs...)
	obj = fixtureWalk(obj, func(s string) string {
		if manyFailures {
			s = fixtureFailuresRE.ReplaceAllString(s, "failed 5 times in a row")
		}
		s = r.replacer.Replace(s)
		s = strings.ReplaceAll(s, r.ns, fixtureNS)
		s = updateNames.Replace(s)
		s = fixtureTimeRE.ReplaceAllString(s, fixtureTime)
		s = fixtureAddressRE.ReplaceAllString(s, fixtureAddress)
		return fixtureUUIDRE.ReplaceAllString(s, fixtureUID)
	}).(map[string]any)
	b, err := yaml.Marshal(obj)
	if err != nil {
		r.t.Fatal(err)
	}
	r.captured[name] = b
}

func fixtureWalk(v any, f func(string) string) any {
	switch v := v.(type) {
	case string:
		return f(v)
	case map[string]any:
		for k, x := range v {
			v[k] = fixtureWalk(x, f)
		}
	case []any:
		for i, x := range v {
			v[i] = fixtureWalk(x, f)
		}
	}
	return v
}

const fixtureHeader = "# Captured from a real operator run by TestCaptureHealthFixtures\n" +
	"# (operator/test/e2e/fixtures_test.go); values that vary between runs are\n" +
	"# placeholders. Regenerate: STACKFLOW_UPDATE_FIXTURES=1 go test ./operator/test/e2e/ -run Fixtures\n"

// finish writes the fixtures (STACKFLOW_UPDATE_FIXTURES=1) or compares them
// with the committed ones, masked.
func (r *fixtureRecorder) finish() {
	r.t.Helper()
	if r.update {
		if err := os.RemoveAll(r.dir); err != nil {
			r.t.Fatal(err)
		}
		if err := os.MkdirAll(r.dir, 0o755); err != nil {
			r.t.Fatal(err)
		}
		for name, b := range r.captured {
			if err := os.WriteFile(filepath.Join(r.dir, name+".yaml"), append([]byte(fixtureHeader), b...), 0o644); err != nil {
				r.t.Fatal(err)
			}
		}
		r.t.Logf("wrote %d fixtures to %s", len(r.captured), r.dir)
		return
	}
	var stale []string
	committed, _ := filepath.Glob(filepath.Join(r.dir, "*.yaml"))
	for _, p := range committed {
		if _, ok := r.captured[strings.TrimSuffix(filepath.Base(p), ".yaml")]; !ok {
			stale = append(stale, fmt.Sprintf("%s: no longer captured", filepath.Base(p)))
		}
	}
	names := make([]string, 0, len(r.captured))
	for name := range r.captured {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(r.dir, name+".yaml"))
		if err != nil {
			stale = append(stale, fmt.Sprintf("%s.yaml: %v", name, err))
			continue
		}
		if d := cmp.Diff(fixtureMasked(r.t, b), fixtureMasked(r.t, r.captured[name])); d != "" {
			stale = append(stale, fmt.Sprintf("%s.yaml (-committed +now):\n%s", name, d))
		}
	}
	if len(stale) > 0 {
		r.t.Fatalf("the captured fixtures in %s are stale; regenerate them with STACKFLOW_UPDATE_FIXTURES=1 go test ./operator/test/e2e/ -run Fixtures:\n%s",
			r.dir, strings.Join(stale, "\n"))
	}
}

// fixtureMasked parses a fixture with hashes and durations masked.
func fixtureMasked(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return fixtureWalk(v, func(s string) string {
		s = fixtureHexRE.ReplaceAllString(s, "<hex>")
		return fixtureDurationRE.ReplaceAllString(s, "<duration>")
	})
}
