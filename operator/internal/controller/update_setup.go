package controller

import (
	"context"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
)

// SetupWithManager registers the controller, its Workspace watch and the
// follower channel.
func (r *UpdateReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Now == nil {
		r.Now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.followers = &followers{ctx: ctx, active: map[types.UID]bool{}, done: make(chan event.GenericEvent, 1024)}
	if err := mgr.Add(manager.RunnableFunc(func(mctx context.Context) error {
		<-mctx.Done()
		cancel()
		return nil
	})); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &autov1alpha1.Update{}, workspaceNameField, func(o client.Object) []string {
		return []string{o.(*autov1alpha1.Update).Spec.WorkspaceName}
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&autov1alpha1.Update{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&autov1alpha1.Workspace{}, handler.EnqueueRequestsFromMapFunc(r.updatesOfWorkspace)).
		WatchesRawSource(source.Channel(r.followers.done, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Workers, 1)}).
		Complete(r)
}

// updatesOfWorkspace wakes the unfinished Updates of a Workspace that changed
// (became ready, or went away). A Workspace being deleted takes its
// remembered agent token with it.
func (r *UpdateReconciler) updatesOfWorkspace(ctx context.Context, o client.Object) []reconcile.Request {
	if !o.GetDeletionTimestamp().IsZero() {
		r.Tokens.forget(o.GetUID())
	}
	var list autov1alpha1.UpdateList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{workspaceNameField: o.GetName()}); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, u := range list.Items {
		if !apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeComplete) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&u)})
		}
	}
	return reqs
}

// Updates: cached reads, deletion after their TTL, the one status patch;
// finalizers/update for the outputs Secret's blockOwnerDeletion reference.
// The outputs Secret is created once (immutable); the workspace token read by
// name.
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=updates,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=updates/status,verbs=patch
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=updates/finalizers,verbs=update
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=workspaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
