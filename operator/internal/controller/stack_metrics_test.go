package controller

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

func TestStackStatesMetric(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = pulumiv1.AddToScheme(scheme)
	stack := func(name string, conds ...metav1.Condition) *pulumiv1.Stack {
		return &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Status: pulumiv1.StackStatus{Conditions: conds}}
	}
	ready := metav1.Condition{Type: pulumiv1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "x"}
	notReady := metav1.Condition{Type: pulumiv1.ReadyCondition, Status: metav1.ConditionFalse, Reason: "x"}
	stalled := metav1.Condition{Type: pulumiv1.StalledCondition, Status: metav1.ConditionTrue, Reason: "x"}
	// Ready and Stalled for generation 1 of a Stack at generation 2: it is
	// being reconciled (conditions count only for their generation).
	staleReady, staleStalled := stack("f", ready), stack("g", notReady, stalled)
	staleReady.Generation, staleStalled.Generation = 2, 2
	for _, s := range []*pulumiv1.Stack{staleReady, staleStalled} {
		for i := range s.Status.Conditions {
			s.Status.Conditions[i].ObservedGeneration = 1
		}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		stack("a", ready), stack("b", ready), stack("c", notReady), stack("d", notReady, stalled), stack("e"), staleReady, staleStalled,
	).Build()
	reg := prometheus.NewRegistry()
	reg.MustRegister(stackStates{reader: c})
	want := `
# HELP stackflow_stacks Stacks by state (ready, reconciling, stalled).
# TYPE stackflow_stacks gauge
stackflow_stacks{state="ready"} 2
stackflow_stacks{state="reconciling"} 4
stackflow_stacks{state="stalled"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "stackflow_stacks"); err != nil {
		t.Fatal(err)
	}
}
