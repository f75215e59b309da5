package controller

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/gitresolve"
)

// NotePush records a verified push on every Stack tracking the pushed branch
// of the repository (given in any of its URL forms), as the PushAnnotation
// with the push's token, and returns how many it marked. The annotation change
// reconciles each Stack on the leader, whichever replica received the push,
// and a push is not lost when the leader changes; the first reconcile lists
// the repository afresh for all of them (gitresolve.Shared.InvalidateOnce).
func (r *StackReconciler) NotePush(ctx context.Context, urls []string, branch, token string) (int, error) {
	n := 0
	seen := map[string]bool{}
	for _, u := range urls {
		key := gitresolve.NormalizeURL(u)
		if seen[key] {
			continue
		}
		seen[key] = true
		var list pulumiv1.StackList
		if err := r.List(ctx, &list, client.MatchingFields{repositoryField: key}); err != nil {
			return n, fmt.Errorf("list the Stacks of a pushed repository: %w", err)
		}
		for i := range list.Items {
			s := &list.Items[i]
			if strings.TrimPrefix(s.Spec.Branch, "refs/heads/") != branch {
				continue
			}
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, PushAnnotation, token)
			if err := r.Patch(ctx, s, client.RawPatch(types.MergePatchType, []byte(patch))); client.IgnoreNotFound(err) != nil {
				return n, fmt.Errorf("mark stack %s/%s: %w", s.Namespace, s.Name, err)
			}
			n++
		}
	}
	return n, nil
}
