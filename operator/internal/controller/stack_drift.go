package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/log"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// Drift checks are decided by the policy (stack.Decide: driftCheckDue,
// remediationPending) and started like any update (startUpdate); this file
// records their results.

// recordDriftCheck records a finished drift check in status.driftCheck and
// the DriftDetected condition; with remediate, found drift makes the next
// update an up with refresh (status.driftCheck.remediationPending, which
// survives restarts). A check that did not run to the end is recorded with
// its failure and leaves the last counts and condition as they were. The
// events follow from the stored record (reportDriftCheck), never from here:
// a reconcile that records a check and then loses its write race, or
// recorded it from a stale copy, reports nothing.
func (r *StackReconciler) recordDriftCheck(ctx context.Context, s *pulumiv1.Stack, cu *pulumiv1.CurrentStackUpdate, u *autov1alpha1.Update, complete *metav1.Condition) {
	dc := s.Status.DriftCheck
	if dc == nil {
		dc = &pulumiv1.DriftCheck{}
		s.Status.DriftCheck = dc
	}
	dc.Update, dc.Revision = u.Name, cu.Commit
	dc.LastCheckTime = endTime(u, metav1.NewTime(r.Now()))
	dc.Failure = ""
	if complete.Reason != autov1alpha1.UpdateReasonSucceeded {
		dc.Failure = or(u.Status.Message, complete.Reason)
		return
	}
	dc.Changes = map[string]int64{}
	var parts []string
	var total int64
	for op, n := range u.Status.Changes {
		if op == "same" || n == 0 {
			continue
		}
		dc.Changes[op] = n
		total += n
		parts = append(parts, fmt.Sprintf("%s %d", op, n))
	}
	sort.Strings(parts)
	if total == 0 {
		apimeta.RemoveStatusCondition(&s.Status.Conditions, pulumiv1.DriftDetectedCondition)
		dc.RemediationPending = false
		return
	}
	msg := fmt.Sprintf("%d resource(s) differ from the last successful update of %s (%s): %s; checked by %s", total, shortRev(dc.Revision), strings.Join(parts, ", "), resourceNames(u.Status.Resources, 10), u.Name)
	setCondition(s, pulumiv1.DriftDetectedCondition, metav1.ConditionTrue, pulumiv1.EventReasonDriftDetected, msg)
	dc.RemediationPending = s.Spec.DriftDetection != nil && s.Spec.DriftDetection.Remediate
	log.FromContext(ctx).Info("Drift detected", "changes", dc.Changes, "remediate", dc.RemediationPending)
}

// reportDriftCheck sends the Warning a newly stored drift check calls for:
// DriftCheckFailed when it did not run to the end, DriftDetected (the
// condition's message) when it found drift. A check is new when
// status.driftCheck.update names another Update than the status before:
// a reconcile that finds the check recorded already sends nothing again.
func reportDriftCheck(rec record.EventRecorder, before, after *pulumiv1.Stack) {
	dc := after.Status.DriftCheck
	if dc == nil || dc.Update == "" || (before.Status.DriftCheck != nil && before.Status.DriftCheck.Update == dc.Update) {
		return
	}
	if dc.Failure != "" {
		rec.Event(after, corev1.EventTypeWarning, pulumiv1.EventReasonDriftCheckFailed, "drift check failed: "+dc.Failure)
		return
	}
	if c := apimeta.FindStatusCondition(after.Status.Conditions, pulumiv1.DriftDetectedCondition); c != nil && c.Status == metav1.ConditionTrue {
		rec.Event(after, corev1.EventTypeWarning, pulumiv1.EventReasonDriftDetected, c.Message)
	}
}

// resourceNames shortens "<op> <urn>" entries to "<op> <type>::<name>", at most
// max of them.
func resourceNames(resources []string, max int) string {
	var out []string
	for i, r := range resources {
		if i == max {
			out = append(out, fmt.Sprintf("and %d more", len(resources)-max))
			break
		}
		op, urn, _ := strings.Cut(r, " ")
		parts := strings.Split(urn, "::")
		if len(parts) >= 2 {
			urn = parts[len(parts)-2] + "::" + parts[len(parts)-1]
		}
		out = append(out, op+" "+urn)
	}
	if len(out) == 0 {
		return "resources not reported"
	}
	return strings.Join(out, ", ")
}
