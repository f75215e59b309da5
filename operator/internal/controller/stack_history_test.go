package controller

import (
	"context"
	"fmt"
	"sort"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
)

// TestUpdateHistoryBounded: after a Stack's status is stored, its recorded
// Updates are released and those beyond the newest UpdateHistory deleted,
// but the last one (named by the status) whatever its number.
func TestUpdateHistoryBounded(t *testing.T) {
	s, _, _ := exportingStack(t)
	s.Spec.Exports = nil
	s.Status.CurrentUpdate, s.Status.UpdateSequence = nil, 12
	s.Status.LastUpdate = &pulumiv1.StackUpdateState{Name: "app-2", Type: autov1alpha1.UpType, State: pulumiv1.SucceededStackStateMessage}
	objs := []client.Object{s}
	for n := int64(1); n <= 12; n++ {
		u, err := stack.Update(s, stack.Plan{Number: n, Type: autov1alpha1.UpType, Purpose: pulumiv1.UpdatePurposeDeploy, Revision: stepsCommit})
		if err != nil {
			t.Fatal(err)
		}
		u.OwnerReferences = []metav1.OwnerReference{{APIVersion: "pulumi.com/v1", Kind: "Stack", Name: "app", UID: s.UID, Controller: ptrTrue()}}
		markEnded(u, autov1alpha1.UpdateReasonSucceeded, false, "ok")
		objs = append(objs, u)
	}
	e := newStackStepEnv(t, interceptor.Funcs{}, objs...)
	e.r.UpdateHistory = 3
	if err := e.r.releaseUpdates(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	var list autov1alpha1.UpdateList
	if err := e.c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range list.Items {
		names = append(names, u.Name)
	}
	sort.Strings(names)
	if fmt.Sprint(names) != "[app-10 app-11 app-12 app-2]" {
		t.Fatalf("Updates kept %v: want the newest 3 and the last one the status names (app-2)", names)
	}
}

func ptrTrue() *bool { b := true; return &b }
