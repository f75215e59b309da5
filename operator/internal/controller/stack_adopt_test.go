package controller

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
)

// TestUpdateStartedButNotRecorded: an Update numbered after the Stack's
// sequence, which the Stack does not name as current, is adopted only when
// the stored Stack lacks it too (the status write that recorded it failed,
// or the operator stopped). When only the cache is behind — the Update's
// creation woke the Stack before the cache saw the write recording it, as
// happens at every update's start — the reconcile writes nothing and runs
// again once the cache has caught up, instead of adopting it again and
// losing a write race.
func TestUpdateStartedButNotRecorded(t *testing.T) {
	for _, tc := range []struct {
		name string
		// recorded: the stored Stack names the Update as current, while
		// the reconciler's cache still has the Stack before that write.
		recorded    bool
		wantPatches int
		wantRequeue time.Duration
	}{
		{name: "cache behind the recording write", recorded: true, wantPatches: 0, wantRequeue: staleRetry},
		{name: "recording write lost", recorded: false, wantPatches: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, autov1alpha1.AddToScheme, pulumiv1.AddToScheme} {
				if err := add(scheme); err != nil {
					t.Fatal(err)
				}
			}
			s := &pulumiv1.Stack{}
			s.Namespace, s.Name, s.Generation, s.UID = "ns", "app", 1, "stack-uid"
			s.Finalizers = []string{StackFinalizer}
			s.Spec = pulumiv1.StackSpec{Stack: "dev", GitSource: &pulumiv1.GitSource{ProjectRepo: "https://git.example.com/acme/app.git", Commit: stepsCommit}}
			s.Status.UpdateSequence = 1
			u, err := stack.Update(s, stack.Plan{Number: 2, Type: autov1alpha1.UpType, Revision: stepsCommit, Message: "deploy"})
			if err != nil {
				t.Fatal(err)
			}
			if err := controllerutil.SetControllerReference(s, u, scheme); err != nil {
				t.Fatal(err)
			}
			base := fake.NewClientBuilder().WithScheme(scheme).
				WithStatusSubresource(&pulumiv1.Stack{}, &autov1alpha1.Update{}).
				WithObjects(s, u).Build()
			ctx := context.Background()
			key := client.ObjectKeyFromObject(s)
			var cached pulumiv1.Stack
			if err := base.Get(ctx, key, &cached); err != nil {
				t.Fatal(err)
			}
			if tc.recorded {
				var stored pulumiv1.Stack
				if err := base.Get(ctx, key, &stored); err != nil {
					t.Fatal(err)
				}
				cu := stack.Current(u)
				stored.Status.CurrentUpdate, stored.Status.UpdateSequence = &cu, 2
				if err := base.Status().Update(ctx, &stored); err != nil {
					t.Fatal(err)
				}
			}
			patches := 0
			// The reconciler's client reads the Stack from a cache that
			// holds cached; APIReader reads the stored one.
			c := interceptor.NewClient(base.(client.WithWatch), interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if st, ok := obj.(*pulumiv1.Stack); ok && k == key {
						cached.DeepCopyInto(st)
						return nil
					}
					return c.Get(ctx, k, obj, opts...)
				},
				SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
					if _, ok := obj.(*pulumiv1.Stack); ok && sub == "status" {
						patches++
					}
					return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
				},
			})
			r := &StackReconciler{Client: c, APIReader: base, Recorder: record.NewFakeRecorder(100), Now: func() time.Time { return stepsNow }, DigestKey: []byte("test-key")}
			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
			if err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			if patches != tc.wantPatches {
				t.Errorf("%d status writes of the Stack, want %d", patches, tc.wantPatches)
			}
			if tc.wantRequeue != 0 && res.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeue after %s, want %s (the cache catching up)", res.RequeueAfter, tc.wantRequeue)
			}
			var stored pulumiv1.Stack
			if err := base.Get(ctx, key, &stored); err != nil {
				t.Fatal(err)
			}
			if cu := stored.Status.CurrentUpdate; cu == nil || cu.Name != u.Name || stored.Status.UpdateSequence != 2 {
				t.Errorf("stored current update %+v, sequence %d: want %s, 2", cu, stored.Status.UpdateSequence, u.Name)
			}
		})
	}
}
