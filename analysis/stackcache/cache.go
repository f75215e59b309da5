package stackcache

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// StackNameLabel is the label the operator puts on a Stack's Updates.
const StackNameLabel = "pulumi.com/stack-name"

// Cache serves Stacks and Updates from informers.
type Cache struct {
	cache    cache.Cache
	notifier *Notifier
	synced   func() bool
}

// Options configures a Cache.
type Options struct {
	// Namespaces restricts the watch; empty watches all namespaces.
	Namespaces []string
}

// Scheme has the types the cache serves.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := pulumiv1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := autov1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// New builds a Cache; Start runs it.
func New(cfg *rest.Config, o Options) (*Cache, error) {
	co := cache.Options{
		Scheme: Scheme(),
		// Verifications read names, commits, generations, conditions and
		// change counts; the rest (configuration, secrets, outputs) is
		// dropped before it is stored, so it cannot leak and costs no memory.
		DefaultTransform: strip,
	}
	if len(o.Namespaces) > 0 {
		co.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range o.Namespaces {
			co.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	c, err := cache.New(cfg, co)
	if err != nil {
		return nil, fmt.Errorf("create informer cache: %w", err)
	}
	return &Cache{cache: c, notifier: NewNotifier()}, nil
}

// Start registers the informers and runs them until ctx ends. It returns
// once they are registered; Synced reports when they have listed.
func (c *Cache) Start(ctx context.Context) (<-chan error, error) {
	si, err := c.cache.GetInformer(ctx, &pulumiv1.Stack{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("stack informer: %w", err)
	}
	ui, err := c.cache.GetInformer(ctx, &autov1alpha1.Update{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("update informer: %w", err)
	}
	h1, err := si.AddEventHandler(handler(c.notifier, stackKey))
	if err != nil {
		return nil, err
	}
	h2, err := ui.AddEventHandler(handler(c.notifier, updateKey))
	if err != nil {
		return nil, err
	}
	c.synced = func() bool { return h1.HasSynced() && h2.HasSynced() }
	done := make(chan error, 1)
	go func() { done <- c.cache.Start(ctx) }()
	return done, nil
}

// Synced reports whether both informers have listed.
func (c *Cache) Synced() bool { return c.synced != nil && c.synced() }

// WaitForSync blocks until the informers have listed or ctx ends.
func (c *Cache) WaitForSync(ctx context.Context) bool { return c.cache.WaitForCacheSync(ctx) }

// Stack returns the Stack, nil when it does not exist.
func (c *Cache) Stack(ctx context.Context, key types.NamespacedName) (*pulumiv1.Stack, error) {
	var s pulumiv1.Stack
	if err := c.cache.Get(ctx, key, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return &s, nil
}

// Update returns the Update, nil when it does not exist.
func (c *Cache) Update(ctx context.Context, key types.NamespacedName) *autov1alpha1.Update {
	var u autov1alpha1.Update
	if err := c.cache.Get(ctx, key, &u); err != nil {
		return nil
	}
	return &u
}

// Watch returns a channel closed when the Stack or one of its Updates next
// changes, and the function to call once the caller stops waiting.
func (c *Cache) Watch(key types.NamespacedName) (<-chan struct{}, func()) {
	return c.notifier.Watch(key)
}

// Notifier is the cache's notifier.
func (c *Cache) Notifier() *Notifier { return c.notifier }

func stackKey(o client.Object) (types.NamespacedName, bool) {
	return types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}, true
}

func updateKey(o client.Object) (types.NamespacedName, bool) {
	name := o.GetLabels()[StackNameLabel]
	return types.NamespacedName{Namespace: o.GetNamespace(), Name: name}, name != ""
}

func handler(n *Notifier, key func(client.Object) (types.NamespacedName, bool)) toolscache.ResourceEventHandler {
	notify := func(obj any) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if o, ok := obj.(client.Object); ok {
			if k, ok := key(o); ok {
				n.Notify(k)
			}
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, obj any) { notify(obj) },
		DeleteFunc: notify,
	}
}

// strip drops what a verification never reads.
func strip(obj any) (any, error) {
	switch o := obj.(type) {
	case *pulumiv1.Stack:
		o.ManagedFields = nil
		o.Annotations = nil
		o.Spec.Config = nil
		o.Spec.Secrets = nil
		o.Spec.SecretRefs = nil
		o.Spec.ConfigRef = nil
		o.Spec.Envs = nil
		o.Spec.EnvRefs = nil
		o.Spec.SecretEnvs = nil
		o.Spec.WorkspaceTemplate = nil
		o.Status.Outputs = nil
		return o, nil
	case *autov1alpha1.Update:
		o.ManagedFields = nil
		o.Annotations = nil
		o.Status.Outputs = ""
		o.Status.Resources = nil
		return o, nil
	}
	return obj, nil
}
