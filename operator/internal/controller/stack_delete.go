package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
)

// reconcileDelete destroys the stack's resources when destroyOnFinalize asks
// (never for a preview-mode Stack; after the Stacks depending on it are
// gone), then releases the Stack's Updates,
// removes its Workspace and the finalizer. Prerequisites never block it.
func (r *StackReconciler) reconcileDelete(ctx context.Context, sc *stackScope) error {
	s := sc.stack
	if !controllerutil.ContainsFinalizer(s, StackFinalizer) {
		return errGone
	}
	switch {
	case skipsDestroy(s):
		// A preview Stack often targets the Pulumi stack of a real one
		// (previewing its promotion): deleting it must not destroy that.
		// Said first in the status (Reconciling, reason DestroySkipped,
		// kept until the Stack is gone), whose stored change sends the
		// DestroySkipped event once (reportStack): retries of the deletion
		// find it said. The status write does not wake the Stack (its watch
		// passes spec and annotation changes): it looks again at once.
		if !destroySkipRecorded(s) {
			return &waitingError{reason: pulumiv1.EventReasonDestroySkipped, msg: destroySkippedMessage(s), requeue: time.Millisecond}
		}
	case s.Spec.DestroyOnFinalize && (s.Status.LastUpdate != nil || s.Status.CurrentUpdate != nil):
		// Dependents are destroyed first. An update in flight (even the
		// first) may be creating resources: wait for it, then destroy.
		if err := r.awaitDependentsOnce(ctx, sc); err != nil {
			return err
		}
		if err := r.reconcileDestroy(ctx, sc); err != nil {
			return err
		}
	}
	if err := r.releaseUpdates(ctx, s, true); err != nil {
		return err
	}
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}}
	if err := r.Delete(ctx, ws); client.IgnoreNotFound(err) != nil {
		return err
	}
	controllerutil.RemoveFinalizer(s, StackFinalizer)
	if err := r.Update(ctx, s); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	// Gone: no status to write.
	return errGone
}

// awaitDependentsOnce waits for the Stack's dependents before its destroy
// starts; once it has started (an update of purpose destroy in flight or
// done), a dependent created meanwhile does not stop it.
func (r *StackReconciler) awaitDependentsOnce(ctx context.Context, sc *stackScope) error {
	s := sc.stack
	if cu := s.Status.CurrentUpdate; cu != nil && cu.Purpose == pulumiv1.UpdatePurposeDestroy {
		return nil
	}
	if lu := s.Status.LastUpdate; lu != nil && lu.Type == autov1alpha1.DestroyType {
		return nil
	}
	return r.awaitDependents(ctx, s)
}

// skipsDestroy: the Stack is deleted with destroyOnFinalize, and destroys
// nothing since it is a preview Stack.
func skipsDestroy(s *pulumiv1.Stack) bool {
	return !s.DeletionTimestamp.IsZero() && s.Spec.DestroyOnFinalize && s.Spec.Preview
}

// destroySkipRecorded: the stored status says the deletion destroys nothing.
func destroySkipRecorded(s *pulumiv1.Stack) bool {
	c := apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.ReconcilingCondition)
	return c != nil && c.Reason == pulumiv1.EventReasonDestroySkipped
}

func destroySkippedMessage(s *pulumiv1.Stack) string {
	return fmt.Sprintf("spec.preview is on: deleted without destroying Pulumi stack %s (preview Stacks never destroy; turn preview off before deleting to destroy)", s.Spec.Stack)
}

// reconcileDestroy runs (and waits for) a destroy update; nil once the
// destroy succeeded.
func (r *StackReconciler) reconcileDestroy(ctx context.Context, sc *stackScope) error {
	s := sc.stack
	if err := r.reconcileCurrentUpdate(ctx, sc); err != nil {
		return err
	}
	lu := s.Status.LastUpdate
	if lu != nil && lu.Type == autov1alpha1.DestroyType && lu.State == pulumiv1.SucceededStackStateMessage {
		return nil
	}
	if lu != nil && lu.Type == autov1alpha1.DestroyType && lu.State == pulumiv1.FailedStackStateMessage {
		wait := stack.Backoff(lu.Failures, 5*time.Minute)
		if due := lu.LastResyncTime.Add(wait); r.Now().Before(due) {
			return &stallingError{reason: pulumiv1.StalledDestroyFailedReason, requeue: due.Sub(r.Now()),
				msg: fmt.Sprintf("destroy failed (attempt %d): %s; retrying in %s, the finalizer is kept until it succeeds", lu.Failures, lu.Message, due.Sub(r.Now()).Round(time.Second))}
		}
	}
	revision, err := r.destroyWorkspace(ctx, sc)
	if err != nil {
		return err
	}
	if err := r.reconcileWorkspace(ctx, sc); err != nil {
		return err
	}
	return r.startUpdate(ctx, sc, stack.Plan{Type: autov1alpha1.DestroyType, Purpose: pulumiv1.UpdatePurposeDestroy,
		Revision: revision, InputsDigest: sc.inputs.Digest, Message: "Stackflow: destroy on finalize"}, "destroy on finalize")
}

// destroyWorkspace sets the Workspace the destroy runs in: derived as for an
// update; from the last deployed commit when the branch is gone; or, when the
// source or the inputs were deleted together with the Stack (a Program, a
// Flux source, an Argo CD application's ConfigMaps), the Workspace as last
// deployed, which holds the program already.
func (r *StackReconciler) destroyWorkspace(ctx context.Context, sc *stackScope) (string, error) {
	s := sc.stack
	lu := s.Status.LastUpdate
	src, err := r.resolveSource(ctx, s)
	if err != nil && s.Spec.GitSource != nil && lu != nil && lu.LastSuccessfulCommit != "" {
		src, err = r.gitSource(ctx, s, lu.LastSuccessfulCommit)
	}
	if err == nil {
		sc.src = src
		if sc.inputs, err = r.readInputs(ctx, s, src); err == nil {
			if sc.ws, err = stack.Workspace(s, sc.inputs); err == nil {
				return src.Revision, nil
			}
		}
	}
	var srcErr *sourceError
	if !errors.As(err, &srcErr) {
		var specErr *stack.SpecError
		if errors.As(err, &specErr) {
			return "", &stallingError{reason: pulumiv1.StalledDestroyFailedReason, msg: "cannot destroy: " + err.Error()}
		}
		return "", err
	}
	var cur autov1alpha1.Workspace
	if getErr := r.Get(ctx, client.ObjectKeyFromObject(s), &cur); getErr != nil {
		if apierrors.IsNotFound(getErr) {
			return "", &stallingError{reason: pulumiv1.StalledDestroyFailedReason, requeue: time.Minute,
				msg: fmt.Sprintf("cannot destroy: %v, and no workspace holds the program as last deployed; restore it, or destroy Pulumi stack %s by hand and remove the finalizer %s", err, s.Spec.Stack, StackFinalizer)}
		}
		return "", getErr
	}
	log.FromContext(ctx).Info("Destroying in the workspace as last deployed", "reason", err.Error())
	sc.ws = cur.DeepCopy()
	sc.ws.ResourceVersion = ""
	// The destroy runs at the commit that workspace holds, which is the
	// last attempted one (a failed update may have followed the last
	// successful one).
	revision := workspaceCommit(sc.ws)
	if revision == "" && lu != nil {
		revision = lu.LastSuccessfulCommit
	}
	return revision, nil
}
