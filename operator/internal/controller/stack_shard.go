package controller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
)

// Shards (pulumiv1.ShardLabel): an operator started with
// --watch-label-selector caches, and so acts on, only the objects of its
// shard. The Stack's Workspace and Updates carry the Stack's shard label.
// When a Stack is relabelled, the new shard finds the Stack's Workspace and
// Updates outside its cache, still labelled for the old one: it takes them
// over (relabels them) only at rest — an Update once it has ended, the
// Workspace once no Update runs — so the old shard finishes the run it
// started and records its end on the Update, and the new shard records that
// result in the Stack's status as any reconcile would: one update applied,
// one result recorded, whatever the timing. The decision state is in the
// Stack's status (updateSequence, currentUpdate), so the new shard decides
// what the old one would have.

// handoverWait is how often a Stack taken from another shard looks again
// while that shard's update runs: the Update's end is not seen through this
// shard's cache.
const handoverWait = 2 * time.Second

// outsideCache reads an object the cache does not hold from the API server:
// found is false when it does not exist at all.
func (r *StackReconciler) outsideCache(ctx context.Context, key types.NamespacedName, obj client.Object) (found bool, err error) {
	if err := r.APIReader.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// takeOver relabels obj, an object of the Stack found outside this shard's
// cache, for the Stack's shard, and says the Stack waits for it to arrive in
// the cache (its event wakes the Stack). An object already labelled so is
// one the cache has not caught up with yet.
func (r *StackReconciler) takeOver(ctx context.Context, s *pulumiv1.Stack, obj client.Object, kind string) error {
	if stack.SameShard(s, obj.GetLabels()) {
		// Created or taken over moments ago: its event wakes the Stack.
		return &waitingError{reason: pulumiv1.ReconcilingProcessingReason, requeue: handoverWait,
			msg: fmt.Sprintf("waiting for %s %s to reach the operator's cache", kind, obj.GetName())}
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	if v, ok := s.Labels[pulumiv1.ShardLabel]; ok {
		labels[pulumiv1.ShardLabel] = v
	} else {
		delete(labels, pulumiv1.ShardLabel)
	}
	obj.SetLabels(labels)
	if err := r.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("take %s %s over from its former shard: %w", kind, obj.GetName(), err)
	}
	log.FromContext(ctx).Info("Took over from another shard", "kind", kind, "name", obj.GetName(), "shard", s.Labels[pulumiv1.ShardLabel])
	return &waitingError{reason: pulumiv1.ReconcilingProcessingReason, requeue: handoverWait,
		msg: fmt.Sprintf("taking %s %s over from the Stack's former shard", kind, obj.GetName())}
}

// currentUpdateElsewhere handles a current Update this shard's cache does
// not hold: running under another shard, the Stack waits for its end;
// ended, it is taken over. Nil when it exists nowhere.
func (r *StackReconciler) currentUpdateElsewhere(ctx context.Context, s *pulumiv1.Stack, name string) error {
	var u autov1alpha1.Update
	found, err := r.outsideCache(ctx, types.NamespacedName{Namespace: s.Namespace, Name: name}, &u)
	if err != nil || !found {
		return err
	}
	if !apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeComplete) && !stack.SameShard(s, u.Labels) {
		return &waitingError{reason: pulumiv1.ReconcilingProcessingReason, requeue: handoverWait,
			msg: fmt.Sprintf("%s %s runs under the Stack's former shard (%s=%q); this shard takes the Stack over when it ends",
				u.Spec.Type, u.Name, pulumiv1.ShardLabel, u.Labels[pulumiv1.ShardLabel])}
	}
	return r.takeOver(ctx, s, &u, "update")
}

// workspaceElsewhere handles a Workspace this shard's cache does not hold:
// one of another shard is taken over. Nil when it exists nowhere.
func (r *StackReconciler) workspaceElsewhere(ctx context.Context, s *pulumiv1.Stack) error {
	var ws autov1alpha1.Workspace
	found, err := r.outsideCache(ctx, client.ObjectKeyFromObject(s), &ws)
	if err != nil || !found {
		return err
	}
	return r.takeOver(ctx, s, &ws, "workspace")
}

// keepWorkspaceInShard takes over, for an up-to-date Stack, a Workspace it
// keeps (workspaceReclaimPolicy Retain) that is not in this shard's cache:
// after a handover, the former shard would otherwise keep its workspace
// pod. A reclaimed Workspace (Delete) is deleted by name, whichever shard
// holds it.
func (r *StackReconciler) keepWorkspaceInShard(ctx context.Context, s *pulumiv1.Stack) error {
	if s.Spec.WorkspaceReclaimPolicy == pulumiv1.WorkspaceReclaimDelete {
		return nil
	}
	var ws autov1alpha1.Workspace
	err := r.Get(ctx, client.ObjectKeyFromObject(s), &ws)
	if !apierrors.IsNotFound(err) {
		return client.IgnoreNotFound(err)
	}
	return r.workspaceElsewhere(ctx, s)
}
