package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
)

func TestWorkspaceEvent(t *testing.T) {
	ready := func(status metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: autov1alpha1.WorkspaceReady, Status: status, Reason: reason, Message: msg}
	}
	stalled := func(reason string) metav1.Condition {
		return metav1.Condition{Type: autov1alpha1.WorkspaceStalled, Status: metav1.ConditionTrue, Reason: reason}
	}
	const pull = autov1alpha1.WorkspaceReasonImagePullFailed
	initializing := ready(metav1.ConditionFalse, autov1alpha1.WorkspaceReasonInitializing, "starting")
	pulling := ready(metav1.ConditionFalse, pull, "ErrImagePull")
	backoff := ready(metav1.ConditionFalse, pull, "ImagePullBackOff")
	running := ready(metav1.ConditionTrue, autov1alpha1.WorkspaceReasonRunning, "agent ready")
	tests := []struct {
		name          string
		before, after []metav1.Condition
		// want is "" for no event, else "<type> <reason> <message>".
		want string
	}{
		{"first reconcile", nil, []metav1.Condition{initializing}, ""},
		{"starting normally", []metav1.Condition{initializing}, []metav1.Condition{initializing}, ""},
		{"starts failing", []metav1.Condition{initializing}, []metav1.Condition{pulling}, "Warning ImagePullFailed ErrImagePull"},
		{"failing on: same reason, new message", []metav1.Condition{pulling}, []metav1.Condition{backoff}, ""},
		{"stalls with the same reason", []metav1.Condition{pulling}, []metav1.Condition{backoff, stalled(pull)}, "Warning ImagePullFailed ImagePullBackOff"},
		{"stays stalled", []metav1.Condition{backoff, stalled(pull)}, []metav1.Condition{backoff, stalled(pull)}, ""},
		{"fails for another reason", []metav1.Condition{backoff, stalled(pull)},
			[]metav1.Condition{ready(metav1.ConditionFalse, autov1alpha1.WorkspaceReasonCrashLooping, "exited"), stalled(autov1alpha1.WorkspaceReasonCrashLooping)},
			"Warning CrashLooping exited"},
		{"failing from the first reconcile", nil, []metav1.Condition{pulling}, "Warning ImagePullFailed ErrImagePull"},
		{"recovers", []metav1.Condition{backoff, stalled(pull)}, []metav1.Condition{running}, "Normal Running agent ready"},
		{"ready again after starting: nothing to report", []metav1.Condition{initializing}, []metav1.Condition{running}, ""},
		{"restarting after a failure is not a new failure", []metav1.Condition{pulling}, []metav1.Condition{initializing}, ""},
		{"deleting", []metav1.Condition{running}, []metav1.Condition{ready(metav1.ConditionFalse, autov1alpha1.WorkspaceReasonDeleting, "bye")}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			typ, reason, msg, ok := workspaceEvent(tt.before, tt.after)
			got := ""
			if ok {
				got = typ + " " + reason + " " + msg
			}
			if got != tt.want {
				t.Fatalf("workspaceEvent = %q, want %q", got, tt.want)
			}
			if ok && typ != corev1.EventTypeWarning && typ != corev1.EventTypeNormal {
				t.Fatalf("event type %q", typ)
			}
		})
	}
}
