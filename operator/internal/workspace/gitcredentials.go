package workspace

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
)

// MissingKeyError: a Secret a workspace refers to has no such key.
type MissingKeyError struct{ Secret, Key string }

func (e *MissingKeyError) Error() string {
	return fmt.Sprintf("secret %s has no key %s", e.Secret, e.Key)
}

// SecretKey reads one key of a Secret of namespace from c (by name: the
// operator never lists or watches Secrets). A missing Secret is NotFound
// (apierrors.IsNotFound), a missing key a *MissingKeyError; neither error
// holds a value.
func SecretKey(ctx context.Context, c client.Reader, namespace string, sel *corev1.SecretKeySelector) (string, error) {
	var s corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: sel.Name}, &s); err != nil {
		return "", fmt.Errorf("secret %s: %w", sel.Name, err)
	}
	v, ok := s.Data[sel.Key]
	if !ok {
		return "", &MissingKeyError{Secret: sel.Name, Key: sel.Key}
	}
	return string(v), nil
}

// GitCredentials reads the current values of the git credentials of ws's
// spec.git.auth, with knownHosts (the operator's --ssh-known-hosts) when it
// uses an SSH key and names none. The local runtime starts agents with them;
// the Workspace controller sends them with each Checkout, so a rotated
// Secret is used by the agent's next fetch.
func GitCredentials(ctx context.Context, c client.Reader, ws *autov1alpha1.Workspace, knownHosts string) (gitauth.Credentials, error) {
	if ws.Spec.Git == nil {
		return gitauth.Credentials{}, nil
	}
	return gitauth.Read(ws.Spec.Git.Auth, knownHosts, func(sel *corev1.SecretKeySelector) (string, error) {
		return SecretKey(ctx, c, ws.Namespace, sel)
	})
}
