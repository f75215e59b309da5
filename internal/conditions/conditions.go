package conditions

import (
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Generational is an object whose spec changes bump its generation
// (metadata.generation): every Kubernetes object.
type Generational interface {
	GetGeneration() int64
}

// Current is obj's condition typ from its conditions conds, or nil when it is
// absent or was written for an older generation than obj's (its
// observedGeneration is below obj's generation). A condition of an older
// generation describes a spec that is gone: the object's controller has not
// looked at the current one yet, so the condition says nothing about it.
func Current(obj Generational, conds []metav1.Condition, typ string) *metav1.Condition {
	c := apimeta.FindStatusCondition(conds, typ)
	if c == nil || c.ObservedGeneration < obj.GetGeneration() {
		return nil
	}
	return c
}

// IsTrue reports whether obj's condition typ is True for its current
// generation (Current).
func IsTrue(obj Generational, conds []metav1.Condition, typ string) bool {
	c := Current(obj, conds, typ)
	return c != nil && c.Status == metav1.ConditionTrue
}
