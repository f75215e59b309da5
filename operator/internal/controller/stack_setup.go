package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	stackflowv1alpha1 "github.com/stackflow-io/stackflow/operator/api/stackflow/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/gitresolve"
)

// SetupWithManager registers the controller and its watches.
func (r *StackReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Git == nil {
		r.Git = &gitresolve.Shared{TTL: time.Minute}
	}
	if r.Resolve == nil {
		r.Resolve = r.Git.Resolve
	}
	// A finished listing wakes the Stacks whose answer it changed (the
	// listings run off the reconcile workers).
	listed := make(chan event.GenericEvent, 1024)
	r.Git.Notify = func(ctx context.Context, n types.NamespacedName) {
		obj := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: n.Namespace, Name: n.Name}}
		select {
		case listed <- event.GenericEvent{Object: obj}:
		case <-ctx.Done():
		}
	}
	if err := mgr.Add(r.Git); err != nil {
		return err
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.SecretPollInterval == 0 {
		r.SecretPollInterval = DefaultSecretPoll
	}
	registerStackStates.Do(func() { metrics.Registry.MustRegister(stackStates{reader: mgr.GetClient()}) })
	if err := indexStacks(mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &stackflowv1alpha1.PlanApproval{}, planApprovalStackField, func(o client.Object) []string {
		return []string{o.(*stackflowv1alpha1.PlanApproval).Spec.StackName}
	}); err != nil {
		return err
	}
	c, err := ctrl.NewControllerManagedBy(mgr).
		For(&pulumiv1.Stack{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Owns(&autov1alpha1.Workspace{}).
		Owns(&autov1alpha1.Update{}).
		// A Stack's status change wakes the Stacks that list it as a
		// prerequisite.
		Watches(&pulumiv1.Stack{}, handler.EnqueueRequestsFromMapFunc(r.indexed(prerequisiteField, objectName))).
		// A Stack's change or deletion wakes the Stacks it depends on
		// (a cycle is reported on all; a deleted dependent lets its
		// upstream destroy).
		Watches(&pulumiv1.Stack{}, handler.EnqueueRequestsFromMapFunc(r.dependencies)).
		// A Program's new artifact wakes the Stacks that use it.
		Watches(&pulumiv1.Program{}, handler.EnqueueRequestsFromMapFunc(r.indexed(programRefField, objectName))).
		// A ConfigMap a Stack refers to appearing or changing wakes it: a
		// Stack stalled on a missing reference recovers by itself. Secrets
		// are not watched (the role grants no list or watch of Secrets, which
		// would read every Secret of the cluster): a Stack reading Secrets
		// reads them again every SecretPollInterval (secretPoll).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.indexed(configMapsField, objectName))).
		// A PlanApproval wakes the Stack it names (spec.approval).
		Watches(&stackflowv1alpha1.PlanApproval{}, handler.EnqueueRequestsFromMapFunc(approvedStack)).
		WatchesRawSource(source.Channel(listed, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Workers, 1)}).
		Build(r)
	if err != nil {
		return err
	}
	// Flux sources are watched once their CRDs are served (Flux may be
	// installed after the operator, or never).
	return mgr.Add(&fluxWatcher{ctrl: c, cache: mgr.GetCache(), config: mgr.GetConfig(), mapFunc: r.indexed(fluxSourceField, fluxObjectKey)})
}

// Stacks: cached reads, the finalizer (Update), push and resync request
// annotations (Patch), the one status patch; finalizers/update for the
// blockOwnerDeletion references of its Workspace and Updates. Updates are
// created, released (Patch of the result finalizer) and old drift checks
// deleted; the Workspace created, updated and deleted. Referenced ConfigMaps
// are watched, referenced Secrets read by name (never cached or watched).
// Exported ConfigMaps and Secrets (spec.exports) are created and updated,
// never deleted (the garbage collector removes the Stack's own).
// +kubebuilder:rbac:groups=pulumi.com,resources=stacks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=pulumi.com,resources=stacks/status,verbs=patch
// +kubebuilder:rbac:groups=pulumi.com,resources=stacks/finalizers,verbs=update
// +kubebuilder:rbac:groups=pulumi.com,resources=programs,verbs=get;list;watch
// +kubebuilder:rbac:groups=source.toolkit.fluxcd.io,resources=gitrepositories;ocirepositories;buckets,verbs=get;list;watch
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=workspaces,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=updates,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=stackflow.io,resources=planapprovals,verbs=get;list;watch

// approvedStack is the Stack a PlanApproval names.
func approvedStack(_ context.Context, o client.Object) []reconcile.Request {
	a := o.(*stackflowv1alpha1.PlanApproval)
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: a.Namespace, Name: a.Spec.StackName}}}
}
