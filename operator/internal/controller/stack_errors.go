package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

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
