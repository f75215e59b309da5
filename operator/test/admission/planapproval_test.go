package admission

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	stackflowv1alpha1 "github.com/stackflow-io/stackflow/operator/api/stackflow/v1alpha1"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestPlanApprovalRecordsWhoDecided installs the admission policy as
// operator/config/admission ships it and creates PlanApprovals as users of
// the API server: one naming its creator is accepted, one naming someone
// else is refused with a message saying who the creator is, and a spec
// cannot be changed afterwards.
func TestPlanApprovalRecordsWhoDecided(t *testing.T) {
	ctx := context.Background()
	ns := cp.Namespace(t)
	// TestInstallManifestsAreValid may have installed it already.
	if err := substrate.InstallPlanApprovalPolicy(ctx, cp.Config, cp.Client, ns); err != nil {
		t.Fatal(err)
	}
	as := func(user string) client.Client {
		cfg := rest.CopyConfig(cp.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters", "system:authenticated"}}
		c, err := client.New(cfg, client.Options{Scheme: cp.Client.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	fp := strings.Repeat("ab", 32)
	approval := func(name, approver string) *stackflowv1alpha1.PlanApproval {
		return &stackflowv1alpha1.PlanApproval{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: stackflowv1alpha1.PlanApprovalSpec{StackName: "prod", Fingerprint: fp, Approver: approver}}
	}
	mallory := as("mallory")
	refusal := mallory.Create(ctx, approval("forged", "alice"))
	if refusal == nil {
		t.Fatal("a PlanApproval in another user's name was accepted")
	}
	if msg := refusal.Error(); !strings.Contains(msg, "spec.approver must be the user creating the PlanApproval (mallory, as kubectl auth whoami shows it), not alice") {
		t.Fatalf("refusal %q does not say whose name to use", msg)
	}
	alice := as("alice")
	a := approval("own", "alice")
	if err := alice.Create(ctx, a); err != nil {
		t.Fatalf("a PlanApproval in its creator's name was refused: %v", err)
	}
	if a.Spec.Decision != stackflowv1alpha1.Approved {
		t.Errorf("decision defaulted to %q, want Approved", a.Spec.Decision)
	}
	a.Spec.Fingerprint = strings.Repeat("cd", 32)
	if err := alice.Update(ctx, a); err == nil || !strings.Contains(err.Error(), "a PlanApproval's spec cannot change: create another") {
		t.Errorf("changing an approval's fingerprint: %v", err)
	}
	bad := approval("short", "alice")
	bad.Spec.Fingerprint = "3f9a"
	if err := alice.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "spec.fingerprint must be the 64 lowercase hexadecimal digits") {
		t.Errorf("a short fingerprint: %v", err)
	}
}
