package conditions

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCurrent(t *testing.T) {
	cond := func(status metav1.ConditionStatus, gen int64) []metav1.Condition {
		return []metav1.Condition{{Type: "Stalled", Status: status, Reason: "R", ObservedGeneration: gen}}
	}
	for _, tc := range []struct {
		name       string
		generation int64
		conds      []metav1.Condition
		current    bool
		isTrue     bool
	}{
		{"absent", 3, nil, false, false},
		{"True at the current generation", 3, cond(metav1.ConditionTrue, 3), true, true},
		{"False at the current generation", 3, cond(metav1.ConditionFalse, 3), true, false},
		{"True at an older generation", 3, cond(metav1.ConditionTrue, 2), false, false},
		{"written without observedGeneration", 3, cond(metav1.ConditionTrue, 0), false, false},
		{"an object without generation (never served by an API server)", 0, cond(metav1.ConditionTrue, 0), true, true},
		{"ahead of the object read (a newer status than spec in a cache)", 3, cond(metav1.ConditionTrue, 4), true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &metav1.ObjectMeta{Generation: tc.generation}
			if got := Current(obj, tc.conds, "Stalled"); (got != nil) != tc.current {
				t.Fatalf("Current = %v, want current %v", got, tc.current)
			}
			if got := IsTrue(obj, tc.conds, "Stalled"); got != tc.isTrue {
				t.Fatalf("IsTrue = %v, want %v", got, tc.isTrue)
			}
			if Current(obj, tc.conds, "Ready") != nil {
				t.Fatal("another type was found")
			}
		})
	}
}
