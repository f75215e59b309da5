package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/stackflow-io/stackflow/internal/conditions"
	"github.com/stackflow-io/stackflow/internal/revision"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

var stackFailuresTotal = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "stackflow_stack_update_failures_total",
	Help: "Failed Stack updates (conflicts excluded).",
})

func init() { metrics.Registry.MustRegister(stackFailuresTotal) }

// stackStates reports Stacks by state from the manager's cache at each scrape.
type stackStates struct{ reader client.Reader }

var stacksDesc = prometheus.NewDesc("stackflow_stacks", "Stacks by state (ready, reconciling, stalled).", []string{"state"}, nil)

func (c stackStates) Describe(ch chan<- *prometheus.Desc) { ch <- stacksDesc }

func (c stackStates) Collect(ch chan<- prometheus.Metric) {
	var list pulumiv1.StackList
	if err := c.reader.List(context.Background(), &list); err != nil {
		return
	}
	counts := map[string]float64{"ready": 0, "reconciling": 0, "stalled": 0}
	for i := range list.Items {
		// A Stack whose conditions describe an older spec is still being
		// reconciled, whatever they say.
		s := &list.Items[i]
		switch {
		case conditions.IsTrue(s, s.Status.Conditions, pulumiv1.StalledCondition):
			counts["stalled"]++
		case conditions.IsTrue(s, s.Status.Conditions, pulumiv1.ReadyCondition):
			counts["ready"]++
		default:
			counts["reconciling"]++
		}
	}
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(stacksDesc, prometheus.GaugeValue, n, state)
	}
}

// registerStackStates registers the collector once per process (tests start
// several managers; the first one's cache serves).
var registerStackStates sync.Once

// stackConditions: a Stack spells kstatus with PKO's condition names and
// reasons: Reconciling and Stalled carry the step's reason, Ready a summary.
var stackConditions = kstatusConditions{
	reconciling: true, inProgressReason: pulumiv1.NotReadyInProgressReason, stalledReason: pulumiv1.NotReadyStalledReason,
}

// stackStatus writes a reconcile's outcome in a Stack's status.
var stackStatus = spelling[*pulumiv1.Stack]{
	ready: func(s *pulumiv1.Stack, _ string) { markStackReady(s) },
	waiting: func(s *pulumiv1.Stack, reason, msg string) {
		if !s.DeletionTimestamp.IsZero() && !runningBeforeDestroy(s) && reason != pulumiv1.EventReasonDestroySkipped && reason != pulumiv1.ReconcilingDependentsExistReason {
			reason = pulumiv1.ReconcilingDeletingReason
		}
		stackConditions.markReconciling(s, reason, msg)
	},
	stalled: markStackStalled,
	awaiting: func(s *pulumiv1.Stack, reason, msg string) {
		// A plan awaiting approval: Ready=False with the reason, neither
		// Reconciling (nothing runs) nor Stalled (nothing is wrong). The
		// spec was processed to a verdict.
		removeCondition(s, pulumiv1.ReconcilingCondition)
		removeCondition(s, pulumiv1.StalledCondition)
		setCondition(s, pulumiv1.ReadyCondition, metav1.ConditionFalse, reason, msg)
		s.Status.ObservedGeneration = s.Generation
		s.Status.ObservedReconcileRequest = s.Annotations[pulumiv1.ReconcileRequestAnnotation]
	},
	transient: func(s *pulumiv1.Stack, err error) {
		reason, msg := pulumiv1.ReconcilingTransientErrorReason, "retrying after an error: "+err.Error()
		if skipsDestroy(s) {
			// The reason stays while the Stack goes (reconcileDelete): it
			// says the deletion destroys nothing, and its event is sent once.
			reason, msg = pulumiv1.EventReasonDestroySkipped, destroySkippedMessage(s)+"; "+msg
		}
		stackConditions.markReconciling(s, reason, msg)
	},
}

// finisher ends every Stack reconcile (see finisher).
func (r *StackReconciler) finisher() *finisher[*pulumiv1.Stack] {
	return &finisher[*pulumiv1.Stack]{kind: "stack", client: r.Client, recorder: r.Recorder, spell: stackStatus, report: reportStack}
}

func markStackReady(s *pulumiv1.Stack) {
	lu := s.Status.LastUpdate
	msg := "the stack is up to date"
	if lu != nil {
		msg = fmt.Sprintf("%s of %s succeeded", lu.Type, shortRev(lu.LastAttemptedCommit))
	}
	stackConditions.markReady(s, pulumiv1.ReadyCompletedReason, msg)
	s.Status.ObservedGeneration = s.Generation
	s.Status.ObservedReconcileRequest = s.Annotations[pulumiv1.ReconcileRequestAnnotation]
}

func markStackStalled(s *pulumiv1.Stack, reason, msg string) {
	stackConditions.markStalled(s, reason, msg)
	// The spec (and any reconcile request) was processed to a verdict the
	// user must act on.
	s.Status.ObservedGeneration = s.Generation
	s.Status.ObservedReconcileRequest = s.Annotations[pulumiv1.ReconcileRequestAnnotation]
}

// reportStack mirrors a change of the Ready condition (or of the reason
// behind it) as an event, Warning for stalls and failures, reports a newly
// recorded drift check (reportDriftCheck), and counts a newly recorded
// failed update. Every event follows from a change of the stored status, so
// a reconcile that lost its write race, or a retry of one that won, sends
// none.
func reportStack(rec record.EventRecorder, before, after *pulumiv1.Stack) {
	if lu := after.Status.LastUpdate; lu != nil && lu.State == pulumiv1.FailedStackStateMessage &&
		(before.Status.LastUpdate == nil || before.Status.LastUpdate.Name != lu.Name) {
		stackFailuresTotal.Inc()
	}
	reportDriftCheck(rec, before, after)
	reportPlan(rec, before, after)
	reportExports(rec, before, after)
	b := readyKey(before)
	a := readyKey(after)
	if a == b || a == "" {
		return
	}
	// The event reason is the Ready reason; the message carries the detail.
	// A preview Stack's deletion names what it does not do instead
	// (DestroySkipped, the reason it keeps while it goes).
	ready := apimeta.FindStatusCondition(after.Status.Conditions, pulumiv1.ReadyCondition)
	reconciling := apimeta.FindStatusCondition(after.Status.Conditions, pulumiv1.ReconcilingCondition)
	typ, reason := corev1.EventTypeNormal, ready.Reason
	switch {
	case apimeta.FindStatusCondition(after.Status.Conditions, pulumiv1.StalledCondition) != nil:
		typ = corev1.EventTypeWarning
	case reconciling != nil && warningReasons[reconciling.Reason]:
		typ = corev1.EventTypeWarning
	case reconciling != nil && reconciling.Reason == pulumiv1.EventReasonDestroySkipped:
		reason = reconciling.Reason
	}
	rec.Event(after, typ, reason, ready.Message)
	if c := apimeta.FindStatusCondition(after.Status.Conditions, pulumiv1.StalledCondition); c != nil && c.Reason == pulumiv1.StalledNamespaceTerminatingReason {
		// A namespace being deleted refuses new Events too: say it on the
		// Namespace (kubectl describe namespace shows it).
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: after.Namespace}}
		ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
		rec.Event(ns, corev1.EventTypeWarning, c.Reason, fmt.Sprintf("Stack %s: %s", after.Name, c.Message))
	}
}

// warningReasons are the Reconciling reasons that report a failure.
var warningReasons = map[string]bool{
	pulumiv1.ReconcilingRetryReason: true, pulumiv1.ReconcilingConflictRetryReason: true,
	pulumiv1.ReconcilingSourceUnreachableReason: true, pulumiv1.ReconcilingTransientErrorReason: true,
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

// shortRev names a revision in a message: shortened, or "the program" for a
// Stack whose source has no revision (a Program reference resolved without one).
func shortRev(rev string) string {
	if rev == "" {
		return "the program"
	}
	return revision.Short(rev)
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
