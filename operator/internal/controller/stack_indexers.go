package controller

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/stackflow-io/stackflow/internal/stackref"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/gitresolve"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
)

// Stack indexes: which objects' changes wake which Stacks. Each is derived
// from the Stack's references (stackref.Refs), the walk admission errors and
// the inputs read derive from too, so a Stack is woken by exactly what it
// reads.
const (
	prerequisiteField = "spec.prerequisites.name"
	programRefField   = "spec.programRef.name"
	configMapsField   = "stackflow.configmaps"
	repositoryField   = "stackflow.repository"
	fluxSourceField   = "stackflow.fluxsource"
	// exportsField: the objects a Stack exports, readsField: the
	// ConfigMaps and Secrets it reads, both as "Kind/name"
	// (stack.ExportKey): who depends on whom.
	exportsField = "stackflow.exports"
	readsField   = "stackflow.reads"
)

// stackIndexes maps each index to the keys a Stack's references give it.
var stackIndexes = map[string]func(refs []stackref.Ref) []string{
	prerequisiteField: func(refs []stackref.Ref) []string { return stackref.Names(refs, stackref.KindStack) },
	programRefField:   func(refs []stackref.Ref) []string { return stackref.Names(refs, stackref.KindProgram) },
	configMapsField:   func(refs []stackref.Ref) []string { return stackref.Names(refs, stackref.KindConfigMap) },
	repositoryField:   trackedRepository,
	fluxSourceField:   fluxSourceKey,
}

// indexStacks registers the Stack indexes.
func indexStacks(indexer client.FieldIndexer) error {
	for field, keys := range map[string]func(*pulumiv1.Stack) []string{exportsField: stack.Exported, readsField: stack.Reads} {
		if err := indexer.IndexField(context.Background(), &pulumiv1.Stack{}, field, func(o client.Object) []string {
			return keys(o.(*pulumiv1.Stack))
		}); err != nil {
			return err
		}
	}
	for field, keys := range stackIndexes {
		if err := indexer.IndexField(context.Background(), &pulumiv1.Stack{}, field, func(o client.Object) []string {
			return keys(stackref.Refs(o.(*pulumiv1.Stack)))
		}); err != nil {
			return err
		}
	}
	return nil
}

// trackedRepository is the normalized repository of a Stack tracking a
// branch (a push to it wakes the Stack; a pinned commit needs no wake-up).
func trackedRepository(refs []stackref.Ref) []string {
	var keys []string
	for _, r := range refs {
		if r.Kind == stackref.KindGit && r.Key != "" {
			keys = append(keys, gitresolve.NormalizeURL(r.Name))
		}
	}
	return keys
}

// fluxSourceKey is "<Kind>/<name>" of the Flux source a Stack uses.
func fluxSourceKey(refs []stackref.Ref) []string {
	var keys []string
	for _, r := range refs {
		if r.Field == stackref.FieldFluxSource {
			keys = append(keys, r.Kind+"/"+r.Name)
		}
	}
	return keys
}

func fluxObjectKey(o client.Object) string {
	return o.GetObjectKind().GroupVersionKind().Kind + "/" + o.GetName()
}

func objectName(o client.Object) string { return o.GetName() }

// referencedSecrets lists the Secrets a Stack reads (secretPoll).
func referencedSecrets(s *pulumiv1.Stack) []string {
	return stackref.Names(stackref.Refs(s), stackref.KindSecret)
}

// indexed maps an object to the Stacks in its namespace whose index field
// holds the object's key.
func (r *StackReconciler) indexed(field string, key func(client.Object) string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list pulumiv1.StackList
		if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{field: key(o)}); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for _, s := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&s)})
		}
		return reqs
	}
}
