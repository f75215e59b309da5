package controller

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// conflictRetry is when a reconcile that lost a write race runs again. The
// write that won usually wakes the object sooner; the delay covers writes
// the controller's predicates do not see (a status patch of a Program, whose
// watch passes spec changes only).
const conflictRetry = time.Second

// quietConflicts wraps each controller's reconciler: a write that lost an
// optimistic-locking race (409 Conflict, "the object has been modified") is
// an expected outcome of two writers, not a failure. The reconcile is run
// again on the stored object, logged at debug level; returned as an error it
// would be logged by controller-runtime as "Reconciler error" with a stack
// trace every few seconds while a Stack retries, which reads as a crash.
//
// The conflicts come from the optimistically locked status writes (Stack,
// Workspace) and from whole-object updates of finalizers (all four kinds).
// Whichever way a reconcile lost, it kept no decision in memory, so running
// it again decides from the stored state.
func quietConflicts(r reconcile.Reconciler) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
		result, err := r.Reconcile(ctx, req)
		if err != nil && apierrors.IsConflict(err) {
			log.FromContext(ctx).V(1).Info("Lost a write race to another writer; reconciling again on the stored object", "error", err.Error())
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return result, err
	})
}
