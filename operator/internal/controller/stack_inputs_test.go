package controller

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
)

// TestReadInputsDigestLabels: the inputs read for each kind of reference,
// and the labels they are digested under, are those every stored
// lastUpdate.inputsDigest was computed with (a change of a label would run
// an update of every Stack); git credentials and accessTokenSecret are not
// inputs; a missing referenced Secret names the field.
func TestReadInputsDigestLabels(t *testing.T) {
	cm := func(name string, data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: data}
	}
	sec := func(name string, data map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		cm("settings", map[string]string{"region": "eu-west-1"}), cm("env-cm", map[string]string{"A": "1"}),
		sec("db", map[string]string{"pw": "hunter2"}), sec("tok", map[string]string{"t": "abc"}), sec("env-sec", map[string]string{"B": "2"}),
		sec("git", map[string]string{"token": "ghp_x"}), sec("pulumi", map[string]string{"accessToken": "pul-x"}),
	).Build()
	key := []byte("digest-key")
	r := &StackReconciler{Client: c, DigestKey: key}
	s := glueStack()
	tokRef := secretRefOf("git", "token")
	s.Spec.ConfigRef = map[string]pulumiv1.ConfigMapRef{"aws:region": {Name: "settings", Key: "region"}}
	s.Spec.SecretRefs = map[string]pulumiv1.ResourceRef{"db:pw": secretRefOf("db", "pw"),
		"lit": {SelectorType: pulumiv1.ResourceSelectorLiteral, ResourceSelector: pulumiv1.ResourceSelector{LiteralRef: &pulumiv1.LiteralRef{Value: "v"}}}}
	s.Spec.EnvRefs = map[string]pulumiv1.ResourceRef{"TOKEN": secretRefOf("tok", "t")}
	s.Spec.Envs, s.Spec.SecretEnvs, s.Spec.AccessTokenSecret = []string{"env-cm"}, []string{"env-sec"}, "pulumi"
	s.Spec.GitSource = &pulumiv1.GitSource{ProjectRepo: "https://x", Branch: "main", GitAuth: &pulumiv1.GitAuthConfig{PersonalAccessToken: &tokRef}}

	in, err := r.readInputs(context.Background(), s, stack.Source{})
	if err != nil {
		t.Fatal(err)
	}
	all, atStart := stack.InputsDigests(key, []stack.InputValue{
		{Ref: "configRef/aws:region", Value: []byte("eu-west-1")},
		{Ref: "secretsRef db:pw", Value: []byte("hunter2"), AtStart: true},
		{Ref: "envRefs TOKEN", Value: []byte("abc"), AtStart: true},
		{Ref: "envs/env-cm/A", Value: []byte("1"), AtStart: true},
		{Ref: "envSecrets/env-sec/B", Value: []byte("2"), AtStart: true},
	})
	if in.Digest != all || in.StartDigest != atStart || in.ConfigMapValues["aws:region"] != "eu-west-1" || len(in.ConfigMapValues) != 1 {
		t.Fatalf("inputs %+v; want digests %s, %s", in, all, atStart)
	}

	s.Spec.EnvRefs["MISSING"] = secretRefOf("gone", "k")
	if _, err := r.readInputs(context.Background(), s, stack.Source{}); err == nil || !strings.Contains(err.Error(), "envRefs MISSING: secret gone not found") {
		t.Fatalf("missing secret: %v", err)
	}
}
