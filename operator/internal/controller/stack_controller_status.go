package controller

import (
	"encoding/json"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

var stackFailuresTotal = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "stackflow_stack_update_failures_total",
	Help: "Failed Stack updates (conflicts excluded).",
})

func init() { metrics.Registry.MustRegister(stackFailuresTotal) }

// Stack status is computed by these small functions; kstatus: Ready always,
// Reconciling and Stalled only while true.

func markReady(s *pulumiv1.Stack) {
	lu := s.Status.LastUpdate
	msg := "the stack is up to date"
	if lu != nil {
		msg = fmt.Sprintf("%s of %s succeeded", lu.Type, shortRev(lu.LastAttemptedCommit))
	}
	apimeta.RemoveStatusCondition(&s.Status.Conditions, pulumiv1.ReconcilingCondition)
	apimeta.RemoveStatusCondition(&s.Status.Conditions, pulumiv1.StalledCondition)
	setCondition(&s.Status.Conditions, s.Generation, pulumiv1.ReadyCondition, metav1.ConditionTrue, pulumiv1.ReadyCompletedReason, msg)
	s.Status.ObservedGeneration = s.Generation
	s.Status.ObservedReconcileRequest = s.Annotations[pulumiv1.ReconcileRequestAnnotation]
}

func markReconciling(s *pulumiv1.Stack, reason, msg string) {
	apimeta.RemoveStatusCondition(&s.Status.Conditions, pulumiv1.StalledCondition)
	setCondition(&s.Status.Conditions, s.Generation, pulumiv1.ReadyCondition, metav1.ConditionFalse, pulumiv1.NotReadyInProgressReason, msg)
	setCondition(&s.Status.Conditions, s.Generation, pulumiv1.ReconcilingCondition, metav1.ConditionTrue, reason, msg)
}

func markStalled(s *pulumiv1.Stack, reason, msg string) {
	apimeta.RemoveStatusCondition(&s.Status.Conditions, pulumiv1.ReconcilingCondition)
	setCondition(&s.Status.Conditions, s.Generation, pulumiv1.ReadyCondition, metav1.ConditionFalse, pulumiv1.NotReadyStalledReason, msg)
	setCondition(&s.Status.Conditions, s.Generation, pulumiv1.StalledCondition, metav1.ConditionTrue, reason, msg)
	// The spec was processed to a verdict the user must act on.
	s.Status.ObservedGeneration = s.Generation
}

// recordEvent mirrors a change of the Ready condition (or of the reason
// behind it) as an event: Warning for stalls and failures.
func (r *StackReconciler) recordEvent(before, after *pulumiv1.Stack) {
	b := readyKey(before)
	a := readyKey(after)
	if a == b || a == "" {
		return
	}
	ready := apimeta.FindStatusCondition(after.Status.Conditions, pulumiv1.ReadyCondition)
	reason, typ := ready.Reason, corev1.EventTypeNormal
	if c := apimeta.FindStatusCondition(after.Status.Conditions, pulumiv1.StalledCondition); c != nil {
		reason, typ = c.Reason, corev1.EventTypeWarning
	} else if c := apimeta.FindStatusCondition(after.Status.Conditions, pulumiv1.ReconcilingCondition); c != nil {
		reason = c.Reason
		if c.Reason == pulumiv1.ReconcilingRetryReason {
			typ = corev1.EventTypeWarning
		}
	}
	r.Recorder.Event(after, typ, reason, ready.Message)
}

func readyKey(s *pulumiv1.Stack) string {
	out := ""
	for _, t := range []string{pulumiv1.ReadyCondition, pulumiv1.ReconcilingCondition, pulumiv1.StalledCondition} {
		if c := apimeta.FindStatusCondition(s.Status.Conditions, t); c != nil {
			out += t + "=" + string(c.Status) + "/" + c.Reason + ";"
		}
	}
	return out
}

func shortRev(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	if rev == "" {
		return "the program"
	}
	return rev
}

func jsonUnmarshal(s string, v any) error {
	if s == "" {
		return nil
	}
	return json.Unmarshal([]byte(s), v)
}

func jsonValue(raw string) apiextensionsv1.JSON {
	return apiextensionsv1.JSON{Raw: []byte(raw)}
}
