package operator

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestUncachedSecrets: Secrets (typed, unstructured, metadata-only, lists)
// are read from the API reader, everything else from the cached client.
func TestUncachedSecrets(t *testing.T) {
	s := Scheme()
	meta := metav1.ObjectMeta{Namespace: "ns", Name: "x"}
	cached := fake.NewClientBuilder().WithScheme(s).WithObjects(
		&corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"from": []byte("cache")}},
		&corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"from": "cache"}}).Build()
	api := fake.NewClientBuilder().WithScheme(s).WithObjects(
		&corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"from": []byte("api")}},
		&corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"from": "api"}}).Build()
	c := newUncachedSecrets(cached, api)
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "ns", Name: "x"}

	var sec corev1.Secret
	if err := c.Get(ctx, key, &sec); err != nil || string(sec.Data["from"]) != "api" {
		t.Fatalf("Secret from %q (%v), want the API reader", sec.Data["from"], err)
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("Secret")
	if err := c.Get(ctx, key, u); err != nil {
		t.Fatal(err)
	}
	if from, _, _ := unstructured.NestedString(u.Object, "data", "from"); from != "YXBp" { // base64 "api"
		t.Fatalf("unstructured Secret data %q, want the API reader's", from)
	}
	var list corev1.SecretList
	if err := c.List(ctx, &list, client.InNamespace("ns")); err != nil || len(list.Items) != 1 || string(list.Items[0].Data["from"]) != "api" {
		t.Fatalf("SecretList %+v (%v), want the API reader's", list.Items, err)
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, key, &cm); err != nil || cm.Data["from"] != "cache" {
		t.Fatalf("ConfigMap from %q (%v), want the cache", cm.Data["from"], err)
	}
	var cms corev1.ConfigMapList
	if err := c.List(ctx, &cms); err != nil || len(cms.Items) != 1 || cms.Items[0].Data["from"] != "cache" {
		t.Fatalf("ConfigMapList %+v (%v), want the cache", cms.Items, err)
	}
}
