package controller

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// The three ways a Stack reconcile step stops, summarized in one place
// (summarize), which sets Ready/Reconciling/Stalled and the requeue:
//   - stallingError: the Stack cannot progress until something changes
//     (Stalled=True); requeue, when set, is when to look again anyway;
//   - waitingError: something under way will wake the Stack (an update, the
//     workspace, a prerequisite, a backoff): Reconciling=True;
//   - any other error is transient: Reconciling=True with the error, and
//     controller-runtime's backoff.
// errUpToDate ends a reconcile with nothing to do: Ready=True.

type stallingError struct {
	reason, msg string
	requeue     time.Duration
}

func (e *stallingError) Error() string { return e.msg }

type waitingError struct {
	reason, msg string
	requeue     time.Duration
}

func (e *waitingError) Error() string { return e.msg }

var errUpToDate = errors.New("up to date")

// errStale: the Stack read from the cache is not the stored one; the
// reconcile is redone once the cache has caught up.
var errStale = errors.New("the cached Stack is older than the stored one")

// summarize turns a reconcile's outcome into conditions and a result.
func (r *StackReconciler) summarize(sc *stackScope, err error) (ctrl.Result, error) {
	s := sc.stack
	var stalling *stallingError
	var waiting *waitingError
	switch {
	case err == nil || errors.Is(err, errUpToDate):
		markReady(s)
		return ctrl.Result{RequeueAfter: sc.requeue}, nil
	case errors.Is(err, errStale):
		sc.skipStatus = true
		// Waiting for the cache to deliver the stored Stack.
		return ctrl.Result{RequeueAfter: time.Second}, nil
	case errors.As(err, &stalling):
		markStalled(s, stalling.reason, stalling.msg)
		return ctrl.Result{RequeueAfter: stalling.requeue}, nil
	case errors.As(err, &waiting):
		reason := waiting.reason
		if !s.DeletionTimestamp.IsZero() && !runningBeforeDestroy(s) {
			reason = pulumiv1.ReconcilingDeletingReason
		}
		markReconciling(s, reason, waiting.msg)
		return ctrl.Result{RequeueAfter: waiting.requeue}, nil
	case apierrors.IsConflict(err):
		// Someone else changed the Stack (or its Workspace) meanwhile: the
		// change's event reconciles it again.
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	markReconciling(s, pulumiv1.ReconcilingTransientErrorReason, "retrying after an error: "+err.Error())
	return ctrl.Result{}, err
}

// runningBeforeDestroy: a deleted Stack's update in flight is not the destroy
// (which runs after it): it keeps its own reason, so a reader tells the two
// apart.
func runningBeforeDestroy(s *pulumiv1.Stack) bool {
	cu := s.Status.CurrentUpdate
	return cu != nil && cu.Purpose != pulumiv1.UpdatePurposeDestroy
}

// createError classifies a failed create: in a namespace being deleted
// Kubernetes refuses new objects, which the Stack cannot get past.
func createError(s *pulumiv1.Stack, what string, err error) error {
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return &stallingError{reason: pulumiv1.StalledNamespaceTerminatingReason, msg: namespaceTerminatingMessage(s, what)}
	}
	return fmt.Errorf("create %s: %w", what, err)
}

// namespaceTerminatingMessage says what happened and exactly how to get out.
func namespaceTerminatingMessage(s *pulumiv1.Stack, what string) string {
	msg := fmt.Sprintf("namespace %s is being deleted and Kubernetes refuses to create the %s this Stack needs", s.Namespace, what)
	if !s.DeletionTimestamp.IsZero() && s.Spec.DestroyOnFinalize && !s.Spec.Preview {
		msg += fmt.Sprintf(": the resources of Pulumi stack %s were NOT destroyed. Destroy them with `pulumi destroy --stack %s` against the stack's backend, "+
			"then release the Stack with `kubectl patch stack %s -n %s --type=merge -p '{\"metadata\":{\"finalizers\":null}}'`. "+
			"To have the operator destroy a Stack's resources, delete the Stack before its namespace", s.Spec.Stack, s.Spec.Stack, s.Name, s.Namespace)
	} else if !s.DeletionTimestamp.IsZero() {
		msg += fmt.Sprintf("; release the Stack with `kubectl patch stack %s -n %s --type=merge -p '{\"metadata\":{\"finalizers\":null}}'`", s.Name, s.Namespace)
	}
	return msg
}
