package controller

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// fluxGroup and fluxKinds are the Flux sources a Stack's fluxSource may name.
const fluxGroup = "source.toolkit.fluxcd.io"

var fluxKinds = []string{"GitRepository", "OCIRepository", "Bucket"}

// fluxWatchInterval is how often the API server is asked whether Flux's
// source kinds are served yet.
const fluxWatchInterval = 20 * time.Second

// fluxWatcher adds a metadata-only watch on each Flux source kind once the API
// server serves it, so a new artifact revision wakes the Stacks using that
// source within seconds (every status change bumps the object's
// resourceVersion, which a metadata watch sees).
type fluxWatcher struct {
	ctrl    controller.Controller
	cache   cache.Cache
	config  *rest.Config
	mapFunc handler.MapFunc
	watched map[string]bool
}

// NeedLeaderElection: watches feed the controller, which runs on the leader.
func (w *fluxWatcher) NeedLeaderElection() bool { return true }

func (w *fluxWatcher) Start(ctx context.Context) error {
	dc, err := discovery.NewDiscoveryClientForConfig(w.config)
	if err != nil {
		return err
	}
	w.watched = map[string]bool{}
	tick := time.NewTicker(fluxWatchInterval)
	defer tick.Stop()
	for {
		w.discover(ctx, dc)
		if len(w.watched) == len(fluxKinds) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// discover watches the Flux kinds now served, at their preferred version.
func (w *fluxWatcher) discover(ctx context.Context, dc discovery.DiscoveryInterface) {
	groups, err := dc.ServerGroups()
	if err != nil {
		return
	}
	for _, g := range groups.Groups {
		if g.Name != fluxGroup {
			continue
		}
		gv := g.PreferredVersion.GroupVersion
		resources, err := dc.ServerResourcesForGroupVersion(gv)
		if err != nil {
			return
		}
		for _, res := range resources.APIResources {
			if w.watched[res.Kind] || !isFluxKind(res.Kind) {
				continue
			}
			parsed, err := schema.ParseGroupVersion(gv)
			if err != nil {
				continue
			}
			obj := &metav1.PartialObjectMetadata{}
			obj.SetGroupVersionKind(parsed.WithKind(res.Kind))
			kind := res.Kind
			if err := w.ctrl.Watch(source.Kind[client.Object](w.cache, obj, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
				// Metadata objects from the cache carry no kind: set it for the key.
				o.GetObjectKind().SetGroupVersionKind(parsed.WithKind(kind))
				return w.mapFunc(ctx, o)
			}))); err != nil {
				log.FromContext(ctx).Error(err, "Watching Flux sources failed", "kind", res.Kind)
				continue
			}
			w.watched[res.Kind] = true
			log.FromContext(ctx).Info("Watching Flux sources", "kind", res.Kind, "version", gv)
		}
	}
}

func isFluxKind(kind string) bool {
	for _, k := range fluxKinds {
		if k == kind {
			return true
		}
	}
	return false
}
