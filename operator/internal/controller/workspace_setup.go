package controller

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
)

// SetupWithManager registers the controller.
func (r *WorkspaceReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&autov1alpha1.Workspace{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&appsv1.StatefulSet{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Workers, 1)})
	if r.WatchPods {
		// Pods are owned by the StatefulSet, not the Workspace: map them by
		// their workspace label.
		b = b.Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(workspaceOfPod))
	}
	return b.Complete(r)
}

// workspaceOfPod is the Workspace a workspace pod runs.
func workspaceOfPod(_ context.Context, obj client.Object) []reconcile.Request {
	l := obj.GetLabels()
	name := l[pod.LabelWorkspaceName]
	if name == "" || l[pod.LabelManagedBy] != pod.LabelManagedByValue {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}

// RBAC: each verb the role grants is justified in
// operator/test/rbac/justification_test.go; add the reason there with a marker.
// Workspaces: cached reads, the finalizer (Update), the one status patch;
// finalizers/update lets the token Secret, StatefulSet and Service carry
// blockOwnerDeletion owner references. The agent token Secret is read by name
// (never cached: see operator.uncachedSecrets) and created once.
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=workspaces,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=workspaces/status,verbs=patch
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=workspaces/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
