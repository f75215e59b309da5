package controller

import (
	"testing"
	"time"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// TestSecretPoll: Secrets are not watched, so an up-to-date Stack reading
// Secrets looks again at least every poll interval; others keep their resync.
func TestSecretPoll(t *testing.T) {
	secretRef := pulumiv1.StackSpec{SecretRefs: map[string]pulumiv1.ResourceRef{"pw": {SelectorType: pulumiv1.ResourceSelectorSecret,
		ResourceSelector: pulumiv1.ResourceSelector{SecretRef: &pulumiv1.SecretSelector{Name: "db", Key: "pw"}}}}}
	legacy := pulumiv1.StackSpec{SecretEnvs: []string{"env"}}
	plain := pulumiv1.StackSpec{}
	for _, tc := range []struct {
		name              string
		spec              pulumiv1.StackSpec
		requeue, interval time.Duration
		want              time.Duration
	}{
		{"no secrets keeps never", plain, 0, time.Minute, 0},
		{"no secrets keeps its resync", plain, 5 * time.Minute, time.Minute, 5 * time.Minute},
		{"secrets, pinned: polled", secretRef, 0, time.Minute, time.Minute},
		{"secrets, slower resync: polled", secretRef, 5 * time.Minute, time.Minute, time.Minute},
		{"secrets, faster resync kept", secretRef, 10 * time.Second, time.Minute, 10 * time.Second},
		{"envSecrets count", legacy, 0, time.Minute, time.Minute},
		{"polling off", secretRef, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &pulumiv1.Stack{Spec: tc.spec}
			if got := secretPoll(s, tc.requeue, tc.interval); got != tc.want {
				t.Fatalf("secretPoll = %s, want %s", got, tc.want)
			}
		})
	}
}
