package controller

import (
	"context"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// setCondition sets a condition, keeping its transition time when the status
// does not change.
func setCondition(conds *[]metav1.Condition, generation int64, typ string, status metav1.ConditionStatus, reason, message string) {
	apimeta.SetStatusCondition(conds, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: generation,
	})
}

// writeStatus is a reconcile's one status write: a merge patch of obj's status
// against base, sent only when changed. retErr keeps the reconcile's own error
// first; an object deleted meanwhile is not an error.
func writeStatus(ctx context.Context, c client.Client, base, obj client.Object, changed bool, retErr *error) {
	if !changed {
		return
	}
	if err := c.Status().Patch(ctx, obj, client.MergeFrom(base)); err != nil && *retErr == nil {
		*retErr = client.IgnoreNotFound(err)
	}
}

// writeStatusLocked is writeStatus with optimistic locking: a reconcile that
// worked from a stale copy of the object fails (and is retried on the stored
// one) instead of overwriting a newer status. It reports whether the status
// is stored as computed (written, or unchanged), so events derived from the
// change are sent once.
func writeStatusLocked(ctx context.Context, c client.Client, base, obj client.Object, changed bool, retErr *error) bool {
	if !changed {
		return true
	}
	if err := c.Status().Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		if *retErr == nil {
			*retErr = client.IgnoreNotFound(err)
		}
		return false
	}
	return true
}
