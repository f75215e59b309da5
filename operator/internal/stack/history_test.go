package stack

import (
	"fmt"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// historyUpdate is Update s-<n>: finished unless running, released unless
// held.
func historyUpdate(n int, running, held bool) autov1alpha1.Update {
	u := autov1alpha1.Update{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%d", n), Annotations: map[string]string{AnnotationNumber: fmt.Sprint(n)}}}
	if !running {
		u.Status.Conditions = []metav1.Condition{{Type: autov1alpha1.UpdateConditionTypeComplete, Status: metav1.ConditionTrue}}
	}
	if held {
		u.Finalizers = []string{ResultFinalizer}
	}
	return u
}

func TestPrunableUpdates(t *testing.T) {
	many := func(n int) []autov1alpha1.Update {
		var us []autov1alpha1.Update
		for i := 1; i <= n; i++ {
			us = append(us, historyUpdate(i, false, false))
		}
		return us
	}
	for _, tc := range []struct {
		name    string
		status  pulumiv1.StackStatus
		updates []autov1alpha1.Update
		limit   int
		want    []string
	}{
		{"within the limit", pulumiv1.StackStatus{UpdateSequence: 3}, many(3), 3, nil},
		{"the oldest beyond it", pulumiv1.StackStatus{UpdateSequence: 6}, many(6), 3, []string{"s-1", "s-2", "s-3"}},
		{"unordered", pulumiv1.StackStatus{UpdateSequence: 5}, []autov1alpha1.Update{historyUpdate(5, false, false), historyUpdate(1, false, false),
			historyUpdate(3, false, false), historyUpdate(2, false, false), historyUpdate(4, false, false)}, 2, []string{"s-1", "s-2", "s-3"}},
		{"what the status names is kept", pulumiv1.StackStatus{UpdateSequence: 8,
			LastUpdate: &pulumiv1.StackUpdateState{Name: "s-1"}, DriftCheck: &pulumiv1.DriftCheck{Update: "s-2"},
			Plan: &pulumiv1.StackPlan{Update: "s-3", ApplyUpdate: "s-4"}, Exports: &pulumiv1.StackExportsStatus{Update: "s-5"}},
			many(8), 2, []string{"s-6"}},
		{"held and running ones are kept", pulumiv1.StackStatus{UpdateSequence: 5},
			[]autov1alpha1.Update{historyUpdate(1, false, true), historyUpdate(2, true, false), historyUpdate(3, false, false), historyUpdate(4, false, false), historyUpdate(5, false, false)},
			1, []string{"s-3", "s-4"}},
		{"unrecorded ones are not counted or pruned", pulumiv1.StackStatus{UpdateSequence: 2}, many(4), 1, []string{"s-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &pulumiv1.Stack{Status: tc.status}
			if got := PrunableUpdates(s, tc.updates, tc.limit); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("PrunableUpdates = %v, want %v", got, tc.want)
			}
		})
	}
}
