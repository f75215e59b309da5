package argocde2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	stackflowv1alpha1 "github.com/stackflow-io/stackflow/operator/api/stackflow/v1alpha1"
	"github.com/stackflow-io/stackflow/test/framework/argocd"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// approvalPolicy is argocd-rbac-cm's policy.csv: alice may approve Stack
// plans, bob may only look.
const approvalPolicy = `p, role:approver, applications, get, */*, allow
p, role:approver, applications, action/pulumi.com/Stack/approve, */*, allow
p, role:viewer, applications, get, */*, allow
g, alice, role:approver
g, bob, role:viewer
`

// TestApproveThroughArgoCD approves a Stack's plan the way a person does in
// Argo CD v3, with authentication and Argo CD's RBAC on and its API server
// running as its own ServiceAccount with the RBAC of Argo CD's manifests
// plus argocd-health's (create PlanApprovals), and the admission policy
// that records approvers installed:
//   - the Stack, requiring approval, is Suspended with the plan's summary
//     and fingerprint, and the Actions menu offers "Approve plan +1 ~0 -0";
//   - bob, without action/pulumi.com/Stack/approve, is refused by Argo CD;
//   - alice's approve naming another fingerprint (a plan that changed since
//     it was shown) is refused by the action, creating nothing;
//   - alice's approve of the shown plan creates a PlanApproval whose
//     approver is Argo CD's ServiceAccount (the admission policy admits it
//     only so), the Stack applies exactly that plan (one update in the
//     backend) and its status names the approval and approver; Argo CD's
//     event on the Application names alice.
func TestApproveThroughArgoCD(t *testing.T) {
	e := startArgo(t, argocd.V3, func(o *argocd.Options) {
		o.Accounts = map[string]string{"alice": "alice-password", "bob": "bob-password"}
		o.RBACPolicy = approvalPolicy
	})
	argo, c := e.argo, e.c
	ctx := context.Background()
	ns, pe := e.approvalNamespace(t)

	r := serveRepos(t)
	prog := r.prog
	sha := prog.Commit(t, "v1", map[string]string{"Pulumi.yaml": program("v1", "")})
	r.manifests.Commit(t, "app", map[string]string{"app/stack.yaml": fmt.Sprintf(`apiVersion: pulumi.com/v1
kind: Stack
metadata:
  name: web
  namespace: %s
spec:
  stack: web-%s
  projectRepo: %s
  branch: main
  approval:
    required: true
`, ns, ns, prog.URL())})
	app := application("approve-"+ns, ns, r.manifestsURL())
	if err := c.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	alice, err := argo.Login(ctx, "alice", "alice-password")
	if err != nil {
		t.Fatal(err)
	}
	bob, err := argo.Login(ctx, "bob", "bob-password")
	if err != nil {
		t.Fatal(err)
	}
	stackGVK := pulumiv1.GroupVersion.WithKind("Stack")
	stack := &pulumiv1.Stack{}
	getStack := func() error { return c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, stack) }

	// 1. Suspended, with the plan, in Argo CD; the menu offers the approval.
	var h *argocd.Health
	substrate.Eventually(t, 4*time.Minute, "the Stack Suspended awaiting approval in Argo CD", func() (bool, error) {
		if err := argo.Exited(); err != nil {
			t.Fatal(err)
		}
		var err error
		if h, err = alice.ResourceHealth(ctx, app.Name, stackGVK.GroupKind(), ns, "web"); err != nil || h == nil {
			return false, err
		}
		return h.Status == "Suspended", fmt.Errorf("health %+v", h)
	})
	if err := getStack(); err != nil {
		t.Fatal(err)
	}
	plan := stack.Status.Plan
	if plan == nil || plan.State != pulumiv1.PlanAwaitingApproval || plan.Commit != sha {
		t.Fatalf("plan %+v, want one awaiting approval at %.7s", plan, sha)
	}
	if want := "awaiting approval: " + plan.Summary + ", plan " + plan.ShortFingerprint(); !strings.Contains(h.Message, want) || plan.Summary != "+1 ~0 -0" {
		t.Fatalf("Argo CD shows %q, want it to contain %q (+1 ~0 -0)", h.Message, want)
	}
	actions, err := alice.Actions(ctx, app.Name, stackGVK, ns, "web")
	if err != nil {
		t.Fatal(err)
	}
	var offered bool
	for _, a := range actions {
		offered = offered || a.Name == "approve" && !a.Disabled && a.DisplayName == "Approve plan +1 ~0 -0"
	}
	if !offered {
		t.Fatalf("the Actions menu offers %+v, want an enabled \"Approve plan +1 ~0 -0\"", actions)
	}

	// 2. Refusals: Argo CD's RBAC (bob), and a plan other than the one shown.
	var apiErr *argocd.APIError
	err = bob.RunActionV2(ctx, app.Name, stackGVK, ns, "web", "approve", nil)
	if !errors.As(err, &apiErr) || apiErr.Status != 403 || !strings.Contains(apiErr.Message, "permission denied") {
		t.Fatalf("bob's approve: %v, want Argo CD's 403 permission denied", err)
	}
	err = alice.RunActionV2(ctx, app.Name, stackGVK, ns, "web", "approve", map[string]string{"fingerprint": strings.Repeat("0", 64)})
	if err == nil || !strings.Contains(err.Error(), "the Stack's plan changed since it was shown: it is now "+plan.Fingerprint) {
		t.Fatalf("approving another fingerprint: %v, want the action's refusal naming the current plan", err)
	}
	var approvals stackflowv1alpha1.PlanApprovalList
	if err := c.List(ctx, &approvals, client.InNamespace(ns)); err != nil || len(approvals.Items) != 0 {
		t.Fatalf("PlanApprovals after the refusals: %d (%v), want none", len(approvals.Items), err)
	}
	if err := getStack(); err != nil || stack.Status.Plan.State != pulumiv1.PlanAwaitingApproval {
		t.Fatalf("after the refusals the plan is %+v (%v), want still awaiting approval", stack.Status.Plan, err)
	}

	// 3. alice approves the shown plan, as the UI's Actions menu does.
	if err := alice.RunActionV2(ctx, app.Name, stackGVK, ns, "web", "approve", map[string]string{"fingerprint": plan.Fingerprint}); err != nil {
		t.Fatalf("alice's approve: %v", err)
	}
	pa := &stackflowv1alpha1.PlanApproval{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "argocd-approve-" + plan.Fingerprint}, pa); err != nil {
		t.Fatal(err)
	}
	if pa.Spec.Approver != argocd.ServerServiceAccount || pa.Spec.Fingerprint != plan.Fingerprint || pa.Spec.Decision != stackflowv1alpha1.Approved {
		t.Fatalf("PlanApproval %+v", pa.Spec)
	}
	substrate.Eventually(t, 3*time.Minute, "the approved plan applied", func() (bool, error) {
		if err := getStack(); err != nil {
			return false, err
		}
		r := apimeta.FindStatusCondition(stack.Status.Conditions, pulumiv1.ReadyCondition)
		return r != nil && r.Status == "True" && stack.Status.Plan.State == pulumiv1.PlanApplied, fmt.Errorf("ready %+v, plan %+v", r, stack.Status.Plan)
	})
	if a := stack.Status.Plan.Approval; a == nil || a.Name != pa.Name || a.Approver != argocd.ServerServiceAccount || stack.Status.Plan.Fingerprint != plan.Fingerprint {
		t.Fatalf("status.plan after the apply %+v", stack.Status.Plan)
	}
	if rec, ok := pe.Record(t, "web-"+ns); !ok || rec != "v1" {
		t.Fatalf("record %q, %v after the approved plan", rec, ok)
	}
	cli := pe.Stack(t, prog.Work, "web-"+ns)
	h2, err := cli.History(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(h2) != 1 || h2[0].Kind != "update" || h2[0].ResourceChanges == nil || (*h2[0].ResourceChanges)["create"] != 2 {
		t.Fatalf("backend history %+v: want one update creating the record (and the stack)", h2)
	}
	// Argo CD's record of the person: its event on the Application.
	substrate.Eventually(t, time.Minute, "Argo CD's event naming alice", func() (bool, error) {
		var events corev1.EventList
		if err := c.List(ctx, &events, client.InNamespace(argocd.Namespace)); err != nil {
			return false, err
		}
		for _, ev := range events.Items {
			if ev.InvolvedObject.Kind == "Application" && ev.InvolvedObject.Name == app.Name && ev.Reason == "ResourceActionRan" {
				if ev.Message != "alice ran action approve on resource pulumi.com/Stack/web" {
					return false, fmt.Errorf("event %q", ev.Message)
				}
				return true, nil
			}
		}
		return false, errors.New("no ResourceActionRan event on the Application")
	})
}
