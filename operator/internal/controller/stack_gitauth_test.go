package controller

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
	"github.com/stackflow-io/stackflow/operator/internal/gitresolve"
)

func secretRefOf(name, key string) pulumiv1.ResourceRef {
	return pulumiv1.ResourceRef{SelectorType: pulumiv1.ResourceSelectorSecret,
		ResourceSelector: pulumiv1.ResourceSelector{SecretRef: &pulumiv1.SecretSelector{Name: name, Key: key}}}
}

// TestGitCredentialsAndHostKeyStall: the resolver gets the Stack's
// credentials (the operator's known_hosts when it names none, the
// deprecated gitAuthSecret otherwise), and a host key matching no
// known_hosts entry stalls the Stack with a readable message.
func TestGitCredentialsAndHostKeyStall(t *testing.T) {
	objs := []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ssh"}, Data: map[string][]byte{"key": []byte("KEY")}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "legacy"}, Data: map[string][]byte{"sshPrivateKey": []byte("OLD"), "knownHosts": []byte("LEGACY-KH")}},
	}
	b := fake.NewClientBuilder().WithScheme(scheme.Scheme)
	for _, o := range objs {
		b = b.WithObjects(o)
	}
	var got gitauth.Credentials
	r := &StackReconciler{Client: b.Build(), SSHKnownHosts: "OPERATOR-KH",
		Resolve: func(_ context.Context, req gitresolve.Request) (string, error) {
			got = req.Auth
			return "", &gitresolve.UnavailableError{Err: &gitauth.HostKeyError{Host: "[git.example]:2222", Fingerprint: "SHA256:abc"}}
		}}
	s := glueStack()
	s.Spec.GitSource = &pulumiv1.GitSource{ProjectRepo: "ssh://git@git.example:2222/r.git", Branch: "main",
		GitAuth: &pulumiv1.GitAuthConfig{SSHAuth: &pulumiv1.SSHAuth{SSHPrivateKey: secretRefOf("ssh", "key")}}}
	_, err := r.resolveSource(context.Background(), s)
	if got.SSHPrivateKey != "KEY" || got.KnownHosts != "OPERATOR-KH" {
		t.Fatalf("resolver got %+v", got)
	}
	var stalling *stallingError
	if err := r.classifySourceError(s, err); !errors.As(err, &stalling) || stalling.reason != pulumiv1.StalledSourceUnavailableReason ||
		!strings.Contains(stalling.msg, "host key for [git.example]:2222 (SHA256:abc) does not match any known_hosts entry") || strings.Contains(stalling.msg, "KEY") {
		t.Fatalf("host key mismatch: %#v", err)
	}

	s.Spec.GitAuth, s.Spec.GitAuthSecret = nil, "legacy"
	_, _ = r.resolveSource(context.Background(), s)
	if got.SSHPrivateKey != "OLD" || got.KnownHosts != "LEGACY-KH" {
		t.Fatalf("legacy secret: resolver got %+v", got)
	}
	s.Spec.GitAuthSecret = "missing"
	_, err = r.resolveSource(context.Background(), s)
	if err := r.classifySourceError(s, err); !errors.As(err, &stalling) || !strings.Contains(stalling.msg, "secret missing not found") {
		t.Fatalf("missing gitAuthSecret: %#v", err)
	}
}

// TestReferencedSecretsGitAuth: every Secret the git credentials read is
// re-read on the secret poll (known_hosts and GitHub App Secrets included).
func TestReferencedSecretsGitAuth(t *testing.T) {
	s := glueStack()
	kh := secretRefOf("kh", "known_hosts")
	s.Spec.GitSource = &pulumiv1.GitSource{ProjectRepo: "https://x", GitAuth: &pulumiv1.GitAuthConfig{
		SSHAuth:   &pulumiv1.SSHAuth{SSHPrivateKey: secretRefOf("ssh", "key"), KnownHosts: &kh},
		GitHubApp: &pulumiv1.GitHubAppAuth{AppID: secretRefOf("app-id", "id"), InstallationID: secretRefOf("app-inst", "i"), PrivateKey: secretRefOf("app-key", "k")}}}
	names := referencedSecrets(s)
	for _, want := range []string{"ssh", "kh", "app-id", "app-inst", "app-key"} {
		if !slices.Contains(names, want) {
			t.Errorf("referencedSecrets = %v, lacks %s", names, want)
		}
	}
}
