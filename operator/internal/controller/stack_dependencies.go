package controller

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
)

// reconcileDependencies refuses a dependency cycle — the Stack depends,
// through prerequisites and the exports it reads, on itself — which would
// otherwise wait for ever (prerequisites) or deploy in a loop (exports): it
// is reported on every Stack of the cycle, and nothing of theirs runs until
// it is broken. A Stack that depends on nothing is not looked at.
func (r *StackReconciler) reconcileDependencies(ctx context.Context, sc *stackScope) error {
	s := sc.stack
	if len(s.Spec.Prerequisites) == 0 && len(stack.Reads(s)) == 0 {
		return nil
	}
	cycle, err := stack.FindCycle(s.Name, r.dependenciesIn(ctx, s.Namespace))
	if err != nil {
		return err
	}
	if cycle != nil {
		// A change of any Stack of the cycle (its spec, its status) wakes
		// the others through the prerequisite and export watches.
		return &stallingError{reason: pulumiv1.StalledDependencyCycleReason, msg: stack.CycleMessage(cycle)}
	}
	return nil
}

// dependenciesIn gives the dependencies of a Stack of namespace ns, from the
// cache: a Stack that does not exist has none.
func (r *StackReconciler) dependenciesIn(ctx context.Context, ns string) func(string) ([]stack.Dependency, error) {
	return func(name string) ([]stack.Dependency, error) {
		var s pulumiv1.Stack
		if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &s); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		var lookupErr error
		deps := stack.DependenciesOf(&s, func(key string) []string {
			names, err := r.stacksWith(ctx, ns, exportsField, key)
			if err != nil {
				lookupErr = err
			}
			return names
		})
		return deps, lookupErr
	}
}

// stacksWith names the Stacks of namespace ns whose index field holds key.
func (r *StackReconciler) stacksWith(ctx context.Context, ns, field, key string) ([]string, error) {
	var list pulumiv1.StackList
	if err := r.List(ctx, &list, client.InNamespace(ns), client.MatchingFields{field: key}); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for _, s := range list.Items {
		names = append(names, s.Name)
	}
	return names, nil
}

// dependents lists the Stacks that depend on s: those listing it as a
// prerequisite, and those reading an object it exports.
func (r *StackReconciler) dependents(ctx context.Context, s *pulumiv1.Stack) ([]stack.Dependency, error) {
	var deps []stack.Dependency
	names, err := r.stacksWith(ctx, s.Namespace, prerequisiteField, s.Name)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		deps = append(deps, stack.Dependency{Stack: n, On: s.Name})
	}
	for _, key := range stack.Exported(s) {
		names, err := r.stacksWith(ctx, s.Namespace, readsField, key)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if n != s.Name {
				deps = append(deps, stack.Dependency{Stack: n, On: s.Name, Via: strings.Replace(key, "/", " ", 1)})
			}
		}
	}
	return deps, nil
}

// awaitDependents keeps a Stack that is deleted with destroyOnFinalize until
// the Stacks depending on it are gone: their resources may use its
// resources, so they are destroyed first (delete the whole chain and it
// unwinds in reverse order). A dependent in a cycle with it does not hold
// it (the cycle would hold both for ever). Its dependents' deletion wakes it
// (the dependency watch).
func (r *StackReconciler) awaitDependents(ctx context.Context, s *pulumiv1.Stack) error {
	deps, err := r.dependents(ctx, s)
	if err != nil || len(deps) == 0 {
		return err
	}
	cycle, err := stack.FindCycle(s.Name, r.dependenciesIn(ctx, s.Namespace))
	if err != nil {
		return err
	}
	inCycle := map[string]bool{}
	for _, d := range cycle {
		inCycle[d.Stack] = true
	}
	var holding []string
	for _, d := range deps {
		if !inCycle[d.Stack] {
			holding = append(holding, d.String())
		}
	}
	if len(holding) == 0 {
		return nil
	}
	return &waitingError{reason: pulumiv1.ReconcilingDependentsExistReason,
		msg: fmt.Sprintf("waiting to destroy until the Stacks depending on this one are deleted: %s", strings.Join(holding, "; "))}
}

// dependencies maps a Stack to the Stacks it depends on (its prerequisites
// and the exporters of what it reads): its deletion, or its change, wakes
// them (awaitDependents; a cycle reported on every Stack of it).
func (r *StackReconciler) dependencies(ctx context.Context, o client.Object) []reconcile.Request {
	s, ok := o.(*pulumiv1.Stack)
	if !ok {
		return nil
	}
	deps := stack.DependenciesOf(s, func(key string) []string {
		names, _ := r.stacksWith(ctx, s.Namespace, exportsField, key)
		return names
	})
	reqs := make([]reconcile.Request, 0, len(deps))
	for _, d := range deps {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: d.On}})
	}
	return reqs
}
