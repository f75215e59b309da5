package operator

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// uncachedSecrets is the manager's client but for Secrets, which it reads
// from the API server (the manager's API reader) instead of the cache. A
// cached read would start an informer listing and watching every Secret the
// operator can see; the role grants Secrets get and create only, so the
// operator holds no Secret it did not ask for by name. Every reconciler and
// the pod runtime use it, however the manager was built (main, tests).
type uncachedSecrets struct {
	client.Client
	api client.Reader
}

func newUncachedSecrets(c client.Client, api client.Reader) client.Client {
	return &uncachedSecrets{Client: c, api: api}
}

// isSecret tells a typed, unstructured or metadata-only Secret (or list).
func (c *uncachedSecrets) isSecret(obj runtime.Object, kind string) bool {
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	return err == nil && gvk == corev1.SchemeGroupVersion.WithKind(kind)
}

func (c *uncachedSecrets) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if c.isSecret(obj, "Secret") {
		return c.api.Get(ctx, key, obj, opts...)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c *uncachedSecrets) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if c.isSecret(list, "SecretList") {
		return c.api.List(ctx, list, opts...)
	}
	return c.Client.List(ctx, list, opts...)
}
