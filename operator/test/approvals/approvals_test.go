package approvals

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	stackflowv1alpha1 "github.com/stackflow-io/stackflow/operator/api/stackflow/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/provider"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// program writes one record whose content is configuration.
const program = `name: approvals
runtime: yaml
config:
  content:
    type: string
resources:
  rec:
    type: stackflowtest:index:Record
    properties:
      name: approved
      content: ${content}
outputs:
  content: ${rec.content}
`

func get(t testing.TB, obj client.Object) error {
	t.Helper()
	return suite.CP.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
}

// waitStack waits until cond holds, reporting the Stack's conditions and
// plan on timeout.
func waitStack(t *testing.T, s *pulumiv1.Stack, what string, cond func(*pulumiv1.Stack) bool) {
	t.Helper()
	substrate.Eventually(t, 3*time.Minute, s.Name+" "+what, func() (bool, error) {
		if err := get(t, s); err != nil {
			return false, err
		}
		c, _ := json.Marshal(s.Status.Conditions)
		p, _ := json.Marshal(s.Status.Plan)
		return cond(s), fmt.Errorf("conditions %s, plan %s", c, p)
	})
}

func ready(s *pulumiv1.Stack) *metav1.Condition {
	return apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.ReadyCondition)
}

// awaiting: the Stack waits for an approval of a plan of commit sha —
// Ready=False with reason AwaitingApproval, neither Reconciling nor Stalled.
func awaiting(sha string) func(*pulumiv1.Stack) bool {
	return func(s *pulumiv1.Stack) bool {
		c := ready(s)
		return c != nil && c.Reason == pulumiv1.NotReadyAwaitingApprovalReason && s.Status.Plan != nil &&
			s.Status.Plan.State == pulumiv1.PlanAwaitingApproval && s.Status.Plan.Commit == sha &&
			apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.ReconcilingCondition) == nil &&
			apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.StalledCondition) == nil &&
			s.Status.ObservedGeneration == s.Generation
	}
}

func readyAt(sha string) func(*pulumiv1.Stack) bool {
	return func(s *pulumiv1.Stack) bool {
		c := ready(s)
		return c != nil && c.Status == metav1.ConditionTrue && s.Status.LastUpdate != nil && s.Status.LastUpdate.LastSuccessfulCommit == sha
	}
}

func approve(t *testing.T, s *pulumiv1.Stack, name, fingerprint string, decision stackflowv1alpha1.PlanDecision) {
	t.Helper()
	a := &stackflowv1alpha1.PlanApproval{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name},
		Spec:       stackflowv1alpha1.PlanApprovalSpec{StackName: s.Name, Fingerprint: fingerprint, Decision: decision, Approver: "alice"},
	}
	if err := suite.CP.Client.Create(context.Background(), a); err != nil {
		t.Fatal(err)
	}
}

// history is the backend's record of the stack's updates (previews are not
// recorded).
func history(t *testing.T, e *operatortest.Env, repo *gitrepo.Repo, stack string) []auto.UpdateSummary {
	t.Helper()
	st := cliStack(t, e, repo, stack)
	h, err := st.History(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// cliStack is the stack as a person with the pulumi CLI, beside the
// operator, sees it.
func cliStack(t *testing.T, e *operatortest.Env, repo *gitrepo.Repo, stack string) auto.Stack {
	t.Helper()
	return e.PE.Stack(t, repo.Work, stack)
}

// TestApprovedPlanIsAppliedExactly walks a Stack requiring approval through
// every state: a change waits with its plan shown; an approval of another
// fingerprint applies nothing; the approval of the shown one applies exactly
// that plan (one update in the backend); a new commit with the same change
// keeps its proposal; a rejection stalls; reality moving between the
// preview and the apply ends PlanStale with nothing outside the plan
// applied, and the change is previewed again for a fresh approval.
func TestApprovedPlanIsAppliedExactly(t *testing.T) {
	e := newEnv(t)
	e.Opts.StackResyncOverride = time.Second
	operatortest.StartOperator(t, suite.CP.Config, e.Opts)
	repo := gitrepo.New(t)
	ctx := context.Background()
	sha1 := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": program, ".gitignore": "Pulumi.*.yaml\n"})
	content := func(v string) map[string]apiextensionsv1.JSON {
		return map[string]apiextensionsv1.JSON{"content": {Raw: []byte(`"` + v + `"`)}}
	}
	s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "gated"}, Spec: pulumiv1.StackSpec{
		Stack: "gated", GitSource: &pulumiv1.GitSource{ProjectRepo: repo.URL(), Branch: "main"}, Config: content("one"),
		Approval: &pulumiv1.ApprovalPolicy{Required: true},
	}}
	if err := suite.CP.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}

	// 1. The first change waits with its plan; nothing is applied.
	waitStack(t, s, "awaiting approval of the first plan", awaiting(sha1))
	p1 := s.Status.Plan
	if p1.Summary != "+1 ~0 -0" || len(p1.Fingerprint) != 64 || p1.SecretName == "" || !p1.ExpiresAt.After(p1.ProposedAt.Time) ||
		len(p1.Resources) != 1 || !strings.HasPrefix(p1.Resources[0], "create urn:pulumi:gated::approvals::stackflowtest:index:Record::rec") {
		t.Fatalf("plan %+v", p1)
	}
	if !strings.Contains(ready(s).Message, "awaiting approval: +1 ~0 -0, plan "+p1.Fingerprint[:12]) {
		t.Errorf("Ready message %q does not summarise the plan", ready(s).Message)
	}
	if _, ok := e.PE.Record(t, "approved"); ok {
		t.Fatal("the record exists before any approval")
	}
	var planSecret corev1.Secret
	if err := suite.CP.Client.Get(ctx, client.ObjectKey{Namespace: e.NS, Name: p1.SecretName}, &planSecret); err != nil || len(planSecret.Data["plan.json"]) == 0 {
		t.Fatalf("plan secret %s: %v", p1.SecretName, err)
	}

	// 2. An approval of another fingerprint applies nothing, and says so.
	approve(t, s, "wrong", strings.Repeat("0", 64), stackflowv1alpha1.Approved)
	waitStack(t, s, "saying the wrong approval applies nothing", func(s *pulumiv1.Stack) bool {
		return awaiting(sha1)(s) && strings.Contains(ready(s).Message, "PlanApproval wrong names plan 000000000000, not the pending plan: it applies nothing")
	})

	// 3. The approval of the shown fingerprint applies exactly that plan.
	approve(t, s, "first", p1.Fingerprint, stackflowv1alpha1.Approved)
	waitStack(t, s, "ready at the first commit", readyAt(sha1))
	if got, _ := e.PE.Record(t, "approved"); got != "one" {
		t.Fatalf("record %q after the approved plan", got)
	}
	if p := s.Status.Plan; p.State != pulumiv1.PlanApplied || p.Fingerprint != p1.Fingerprint || p.Approval == nil ||
		p.Approval.Name != "first" || p.Approval.Approver != "alice" || p.ApplyUpdate != s.Status.LastUpdate.Name {
		t.Fatalf("plan after apply %+v (last update %s)", p, s.Status.LastUpdate.Name)
	}
	h := history(t, e, repo, "gated")
	if len(h) != 1 || h[0].Kind != "update" || h[0].ResourceChanges == nil || (*h[0].ResourceChanges)["create"] != 2 {
		t.Fatalf("backend history %+v: want one update creating the record (and the stack)", h)
	}

	// 4. A change proposed, then a commit with the same change (a README):
	// same fingerprint, same proposal; a rejection stalls it; an approval
	// made after the rejection applies it at the newer commit.
	mutate(t, s, func() { s.Spec.Config = content("two") })
	waitStack(t, s, "awaiting approval of the second plan", func(s *pulumiv1.Stack) bool {
		return awaiting(sha1)(s) && s.Status.Plan.Fingerprint != p1.Fingerprint
	})
	p2 := s.Status.Plan
	if p2.Summary != "+0 ~1 -0" {
		t.Fatalf("second plan %+v", p2)
	}
	sha2 := repo.Commit(t, "readme", map[string]string{"README.md": "docs only\n"})
	waitStack(t, s, "awaiting approval of the same change at the README commit", awaiting(sha2))
	if p := s.Status.Plan; p.Fingerprint != p2.Fingerprint || !p.ProposedAt.Equal(&p2.ProposedAt) || p.Update == p2.Update {
		t.Fatalf("the same change at a new commit: plan %+v, was %+v", p, p2)
	}
	approve(t, s, "no", p2.Fingerprint, stackflowv1alpha1.Rejected)
	waitStack(t, s, "stalled on the rejection", func(s *pulumiv1.Stack) bool {
		c := apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.StalledCondition)
		return c != nil && c.Reason == pulumiv1.StalledPlanRejectedReason && s.Status.Plan.State == pulumiv1.PlanRejected
	})
	if got, _ := e.PE.Record(t, "approved"); got != "one" {
		t.Fatalf("record %q after a rejection", got)
	}
	// Creation times have a second's resolution (a tie is a rejection):
	// the approval is made once the clock has passed the rejection's
	// second, as a person's would be.
	rejection := &stackflowv1alpha1.PlanApproval{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "no"}}
	if err := get(t, rejection); err != nil {
		t.Fatal(err)
	}
	substrate.Eventually(t, 5*time.Second, "the second after the rejection", func() (bool, error) {
		return time.Now().After(rejection.CreationTimestamp.Add(time.Second)), nil
	})
	approve(t, s, "yes", p2.Fingerprint, stackflowv1alpha1.Approved)
	waitStack(t, s, "ready at the README commit", readyAt(sha2))
	if got, _ := e.PE.Record(t, "approved"); got != "two" {
		t.Fatalf("record %q after the second approval", got)
	}

	// 5. Reality moves between the preview and the apply: the stack's
	// resources are destroyed out of band after the plan (which updates
	// the record) was made. The apply stops at the first operation the
	// plan does not contain; nothing is created.
	mutate(t, s, func() { s.Spec.Config = content("three") })
	waitStack(t, s, "awaiting approval of the third plan", func(s *pulumiv1.Stack) bool {
		return awaiting(sha2)(s) && s.Status.Plan.Summary == "+0 ~1 -0" && s.Status.Plan.Fingerprint != p2.Fingerprint
	})
	p3 := s.Status.Plan
	cli := cliStack(t, e, repo, "gated")
	if _, err := cli.Destroy(ctx); err != nil {
		t.Fatalf("out-of-band destroy: %v", err)
	}
	approve(t, s, "third", p3.Fingerprint, stackflowv1alpha1.Approved)
	var stale *pulumiv1.StackPlan
	waitStack(t, s, "previewing again after the stale plan", func(s *pulumiv1.Stack) bool {
		if s.Status.Plan != nil && s.Status.Plan.State == pulumiv1.PlanStale {
			stale = s.Status.Plan.DeepCopy()
		}
		return stale != nil && awaiting(sha2)(s) && s.Status.Plan.Fingerprint != p3.Fingerprint
	})
	if !strings.Contains(stale.Message, "is not allowed by the plan") || stale.Approval == nil || stale.Approval.Name != "third" {
		t.Errorf("stale plan %+v does not say which operation diverged", stale)
	}
	if _, ok := e.PE.Record(t, "approved"); ok {
		t.Fatal("the stale plan's apply created the record: an operation outside the plan ran")
	}
	if s.Status.Plan.Summary != "+1 ~0 -0" {
		t.Errorf("the new plan %+v does not create the record again", s.Status.Plan)
	}
	var events corev1.EventList
	if err := suite.CP.Client.List(ctx, &events, client.InNamespace(e.NS)); err != nil {
		t.Fatal(err)
	}
	staleEvents := 0
	for _, ev := range events.Items {
		if ev.Reason == pulumiv1.EventReasonPlanStale && ev.InvolvedObject.Name == s.Name {
			staleEvents++
		}
	}
	if staleEvents != 1 {
		t.Errorf("%d PlanStale events, want 1", staleEvents)
	}
	// The approval of the stale plan is spent: the new plan waits for its own.
	approve(t, s, "fourth", s.Status.Plan.Fingerprint, stackflowv1alpha1.Approved)
	waitStack(t, s, "ready after the fresh approval", func(s *pulumiv1.Stack) bool {
		return readyAt(sha2)(s) && s.Status.Plan.State == pulumiv1.PlanApplied && s.Status.Plan.Approval.Name == "fourth"
	})
	if got, _ := e.PE.Record(t, "approved"); got != "three" {
		t.Fatalf("record %q after the fresh approval", got)
	}
}

// mutate reads obj, applies change and updates it, retrying on conflicts
// with the operator's status patches.
func mutate(t testing.TB, obj client.Object, change func()) {
	t.Helper()
	substrate.Eventually(t, 30*time.Second, "update "+obj.GetName(), func() (bool, error) {
		if err := get(t, obj); err != nil {
			return false, err
		}
		change()
		err := suite.CP.Client.Update(context.Background(), obj)
		return err == nil, err
	})
}

// TestApprovedPlanAppliedOnceAcrossOperatorRestarts: the operator is
// stopped between the approval and the apply (the approval arrives while
// none runs), and again during the apply (the provider holds the update):
// each operator decides from the Stack's status alone, and the plan is
// applied once, never twice, never another.
func TestApprovedPlanAppliedOnceAcrossOperatorRestarts(t *testing.T) {
	e := newEnv(t)
	e.Opts.StackResyncOverride = time.Second
	hold := filepath.Join(t.TempDir(), "hold")
	e.Opts.AgentEnv[provider.HoldEnv] = hold
	_, stop := operatortest.StartOperator(t, suite.CP.Config, e.Opts)
	repo := gitrepo.New(t)
	ctx := context.Background()
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": program, ".gitignore": "Pulumi.*.yaml\n"})
	s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "chaos"}, Spec: pulumiv1.StackSpec{
		Stack: "chaos", GitSource: &pulumiv1.GitSource{ProjectRepo: repo.URL(), Branch: "main"},
		Config:   map[string]apiextensionsv1.JSON{"content": {Raw: []byte(`"once"`)}},
		Approval: &pulumiv1.ApprovalPolicy{Required: true},
	}}
	if err := suite.CP.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	waitStack(t, s, "awaiting approval", awaiting(sha))
	fp := s.Status.Plan.Fingerprint

	// Between the approval and the apply: no operator runs when it comes.
	stop()
	approve(t, s, "while-down", fp, stackflowv1alpha1.Approved)
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, stop = operatortest.StartOperator(t, suite.CP.Config, e.Opts)
	var applying string
	waitStack(t, s, "applying the plan approved while no operator ran", func(s *pulumiv1.Stack) bool {
		if cu := s.Status.CurrentUpdate; cu != nil && s.Status.Plan.State == pulumiv1.PlanApplying {
			applying = cu.Name
		}
		return applying != ""
	})
	u := &autov1alpha1.Update{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: applying}}
	substrate.Eventually(t, 2*time.Minute, "the apply running in the workspace", func() (bool, error) {
		if err := get(t, u); err != nil {
			return false, err
		}
		return apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeProgressing), nil
	})
	if u.Spec.PlanSecretName == "" {
		t.Fatalf("the apply %s is not constrained to the plan", u.Name)
	}

	// During the apply: the operator stops while the provider holds the
	// update, and another takes over.
	stop()
	operatortest.StartOperator(t, suite.CP.Config, e.Opts)
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	waitStack(t, s, "ready with the plan applied", func(s *pulumiv1.Stack) bool {
		return readyAt(sha)(s) && s.Status.Plan.State == pulumiv1.PlanApplied
	})
	if s.Status.Plan.ApplyUpdate != applying || s.Status.Plan.Approval.Name != "while-down" || s.Status.LastUpdate.Name != applying {
		t.Fatalf("plan %+v, last update %s: want the one apply %s", s.Status.Plan, s.Status.LastUpdate.Name, applying)
	}
	if got, _ := e.PE.Record(t, "approved"); got != "once" {
		t.Fatalf("record %q", got)
	}
	if h := history(t, e, repo, "chaos"); len(h) != 1 {
		t.Fatalf("the backend recorded %d updates, want the one apply: %+v", len(h), h)
	}
}
