package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	stackflowv1alpha1 "github.com/stackflow-io/stackflow/operator/api/stackflow/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/plan"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
)

// planApprovalStackField indexes PlanApprovals by spec.stackName.
const planApprovalStackField = "spec.stackName"

// planPreviewKeep is how much longer than its plan may be approved a plan
// preview (and the Secret holding its plan, which it owns) is kept.
const planPreviewKeep = time.Hour

// gated: the decision runs something that changes infrastructure, which a
// Stack requiring approval does only through an approved plan. Drift checks
// change nothing; destroys on deletion do not wait (see docs/approvals.md).
func gated(s *pulumiv1.Stack, d stack.Decision) bool {
	return stack.ApprovalRequired(s) && d.Action == stack.Run && d.UpdateType == autov1alpha1.UpType &&
		(d.Purpose == pulumiv1.UpdatePurposeDeploy || d.Purpose == pulumiv1.UpdatePurposeRemediate)
}

// desired is the change a Run decision asks for, as a plan records it.
func desired(s *pulumiv1.Stack, sc *stackScope) stack.Desired {
	return stack.Desired{
		Generation: s.Generation, ReconcileRequest: s.Annotations[pulumiv1.ReconcileRequestAnnotation],
		Revision: sc.src.Revision, InputsDigest: sc.inputs.Digest, Purpose: sc.decision.Purpose,
	}
}

// reconcileApproval puts a Run decision of a Stack requiring approval
// through the gate (stack.Gate): preview the change to save its plan, wait
// for a person, stop at a rejection, or apply the approved plan.
func (r *StackReconciler) reconcileApproval(ctx context.Context, sc *stackScope) error {
	s := sc.stack
	if !gated(s, sc.decision) {
		return nil
	}
	verdicts, err := r.planVerdicts(ctx, s)
	if err != nil {
		return err
	}
	g := stack.Gate(s.Status.Plan, desired(s, sc), verdicts, r.Now())
	sc.gate = &g
	if g.Action == stack.GateAwait || g.Action == stack.GateRejected {
		g.RequeueAfter = stack.AwaitRequeue(stack.Input{Stack: s, ResyncOverride: r.ResyncOverride}, g.RequeueAfter)
	}
	switch g.Action {
	case stack.GateAwait:
		return &awaitingError{reason: pulumiv1.NotReadyAwaitingApprovalReason, msg: g.Reason, requeue: g.RequeueAfter}
	case stack.GateRetry:
		return &waitingError{reason: pulumiv1.ReconcilingRetryReason, msg: g.Reason, requeue: g.RequeueAfter}
	case stack.GateRejected:
		s.Status.Plan.State = pulumiv1.PlanRejected
		s.Status.Plan.Approval = decisionRecord(g.Verdict)
		return &stallingError{reason: pulumiv1.StalledPlanRejectedReason, msg: g.Reason, requeue: g.RequeueAfter}
	}
	return nil
}

// gatedUpdate is the Update the gate starts: a preview saving a plan, or
// the up constrained to the approved one.
func (r *StackReconciler) gatedUpdate(sc *stackScope) (stack.Plan, string) {
	s, d, g := sc.stack, sc.decision, sc.gate
	p := stack.Plan{Revision: sc.src.Revision, InputsDigest: sc.inputs.Digest, Refresh: d.Refresh}
	if g.Action == stack.GateApply {
		p.Type, p.Purpose, p.PlanSecret = autov1alpha1.UpType, d.Purpose, s.Status.Plan.SecretName
		p.Message = "Stackflow: " + g.Reason
		s.Status.Plan.State = pulumiv1.PlanApplying
		s.Status.Plan.Approval = nil
		if g.Verdict != nil {
			s.Status.Plan.Approval = decisionRecord(g.Verdict)
		}
		s.Status.Plan.ApplyUpdate = stack.UpdateName(s, s.Status.UpdateSequence+1)
		return p, g.Reason
	}
	p.Type, p.Purpose, p.PlanFor, p.SavePlan = autov1alpha1.PreviewType, pulumiv1.UpdatePurposePlan, d.Purpose, true
	p.TTL = stack.PlanExpiry(s) + planPreviewKeep
	p.Message = "Stackflow: " + g.Reason
	return p, g.Reason
}

func decisionRecord(v *stack.Verdict) *pulumiv1.PlanDecision {
	d := &pulumiv1.PlanDecision{Name: v.Name, Approver: v.Approver, Decision: string(stackflowv1alpha1.Approved), Time: metav1.NewTime(v.Time)}
	if !v.Approve {
		d.Decision = string(stackflowv1alpha1.Rejected)
	}
	return d
}

// planVerdicts reads the PlanApprovals naming the Stack (cached, indexed).
func (r *StackReconciler) planVerdicts(ctx context.Context, s *pulumiv1.Stack) ([]stack.Verdict, error) {
	var list stackflowv1alpha1.PlanApprovalList
	if err := r.List(ctx, &list, client.InNamespace(s.Namespace), client.MatchingFields{planApprovalStackField: s.Name}); err != nil {
		return nil, fmt.Errorf("list plan approvals: %w", err)
	}
	verdicts := make([]stack.Verdict, 0, len(list.Items))
	for _, a := range list.Items {
		if !a.DeletionTimestamp.IsZero() {
			continue
		}
		verdicts = append(verdicts, stack.Verdict{
			Name: a.Name, Fingerprint: a.Spec.Fingerprint, Approve: a.Spec.Decision != stackflowv1alpha1.Rejected,
			Approver: a.Spec.Approver, Time: a.CreationTimestamp.Time,
		})
	}
	return verdicts, nil
}

// recordPlanPreview records a finished plan preview in status.plan: the
// plan it saved (parsed, fingerprinted, summarised), or why it made none.
func (r *StackReconciler) recordPlanPreview(ctx context.Context, s *pulumiv1.Stack, cu *pulumiv1.CurrentStackUpdate, u *autov1alpha1.Update, succeeded bool) {
	want := stack.Desired{Generation: cu.Generation, ReconcileRequest: cu.ReconcileRequest, Revision: cu.Commit, InputsDigest: cu.InputsDigest,
		Purpose: pulumiv1.UpdatePurpose(u.Annotations[stack.AnnotationPlanFor])}
	end := endTime(u, metav1.NewTime(r.Now())).Time
	failed := func(msg string) { s.Status.Plan = stack.PlanPreviewFailed(s.Status.Plan, want, u.Name, msg, end) }
	if !succeeded {
		failed(u.Status.Message)
		return
	}
	data, err := r.readPlanSecret(ctx, u)
	if err != nil {
		failed(err.Error())
		return
	}
	p, err := plan.Parse(data)
	if err != nil {
		failed(err.Error())
		return
	}
	sum := p.Summarize()
	s.Status.Plan = stack.RecordPlan(s.Status.Plan, stack.ProposedPlan{
		Fingerprint: p.Fingerprint(cu.InputsDigest), Summary: sum.Text(), Changes: sum.Changes, Resources: sum.Resources,
		MoreResources: int64(sum.More), Desired: want, Update: u.Name, SecretName: u.Status.PlanSecretName, CreatedAt: end,
	}, stack.PlanExpiry(s))
	log.FromContext(ctx).Info("Recorded a plan for approval", "update", u.Name, "fingerprint", s.Status.Plan.Fingerprint, "summary", s.Status.Plan.Summary)
}

// readPlanSecret reads the plan a preview saved.
func (r *StackReconciler) readPlanSecret(ctx context.Context, u *autov1alpha1.Update) ([]byte, error) {
	if u.Status.PlanSecretName == "" {
		return nil, fmt.Errorf("the preview %s saved no plan", u.Name)
	}
	var sec corev1.Secret
	if err := r.getWritten(ctx, types.NamespacedName{Namespace: u.Namespace, Name: u.Status.PlanSecretName}, &sec); err != nil {
		return nil, fmt.Errorf("read the plan of %s: %w", u.Name, err)
	}
	return sec.Data[planKey], nil
}

// recordPlanApply records what became of an approved plan once the up
// constrained to it has ended: applied, stale (the engine met an operation
// the plan does not contain; nothing outside it was applied), or failed.
// Either way its approval is spent.
func recordPlanApply(s *pulumiv1.Stack, u *autov1alpha1.Update, reason string) {
	p := s.Status.Plan
	if p == nil || u.Spec.PlanSecretName != p.SecretName {
		return
	}
	p.ApplyUpdate = u.Name
	switch reason {
	case autov1alpha1.UpdateReasonSucceeded:
		p.State, p.Message = pulumiv1.PlanApplied, ""
	case autov1alpha1.UpdateReasonPlanStale:
		p.State = pulumiv1.PlanStale
		p.Message = "the up stopped at an operation the approved plan does not contain; nothing outside the plan was applied: " + u.Status.PlanViolation
	default:
		p.State, p.Message = pulumiv1.PlanFailed, u.Status.Message
	}
}

// reportPlan sends a PlanStale warning when an approved plan turned out
// stale (the Ready transitions report the rest).
func reportPlan(rec record.EventRecorder, before, after *pulumiv1.Stack) {
	a, b := after.Status.Plan, before.Status.Plan
	if a == nil || a.State != pulumiv1.PlanStale || b != nil && b.State == pulumiv1.PlanStale && b.ApplyUpdate == a.ApplyUpdate {
		return
	}
	rec.Event(after, corev1.EventTypeWarning, pulumiv1.EventReasonPlanStale, conditionMessage(fmt.Sprintf("plan %s: %s", stack.ShortFingerprint(a.Fingerprint), a.Message)))
}
