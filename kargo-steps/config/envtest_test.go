package config

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestDryRunOnKubeAPIServer creates every shipped object on a real
// kube-apiserver with Kargo's CRDs installed, as a server-side dry run with
// strict field validation: an unknown or misspelt field, a wrong type or a
// broken CEL rule of the CRDs fails.
func TestDryRunOnKubeAPIServer(t *testing.T) {
	cp := substrate.StartControlPlaneT(t)
	crds, err := substrate.InstallCRDsWith(cp.Config, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(kargoDir(), "crds")}, ErrorIfPathMissing: true,
	})
	if err != nil {
		t.Fatalf("install Kargo CRDs: %v", err)
	}
	if len(crds) != 9 {
		t.Fatalf("installed %d Kargo CRDs, want 9", len(crds))
	}
	// A client made after the CRDs exist, so that its REST mapper knows them.
	c, err := client.New(cp.Config, client.Options{Scheme: cp.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kargo-demo"}}); err != nil {
		t.Fatal(err)
	}
	create := func(obj map[string]any) error {
		u := &unstructured.Unstructured{Object: roundTrip(t, obj)}
		return c.Create(ctx, u, client.DryRunAll, client.FieldValidation("Strict"))
	}
	n := 0
	for dir, objs := range shipped(t) {
		for _, obj := range objs {
			n++
			if err := create(obj); err != nil {
				t.Errorf("%s: %v %s: %v", dir, obj["kind"], str(obj, "metadata", "name"), err)
			}
		}
	}
	if n != 7 {
		t.Errorf("%d objects shipped, want 7 (2 tasks, 2 namespaced tasks, 3 Stages)", n)
	}
	// The dry run is no rubber stamp: an unknown field, a task step without
	// uses, and a Stage step with retry on a task reference are refused.
	task := build(t, "tasks")[0]
	unknown := roundTrip(t, task)
	unknown["spec"].(map[string]any)["steps"].([]any)[0].(map[string]any)["usse"] = "x"
	noUses := roundTrip(t, task)
	delete(noUses["spec"].(map[string]any)["steps"].([]any)[0].(map[string]any), "uses")
	stage := build(t, "stages")[0]
	retry := roundTrip(t, stage)
	field(retry, "spec", "promotionTemplate", "spec").(map[string]any)["steps"].([]any)[0].(map[string]any)["retry"] = map[string]any{"timeout": "1h"}
	for _, tt := range []struct {
		name string
		obj  map[string]any
		want string
	}{
		{"unknown field", unknown, "unknown field"},
		{"step without uses", noUses, "must have uses set"},
		{"retry on a task reference", retry, "cannot set retry"},
	} {
		err := create(tt.obj)
		if err == nil || !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}
