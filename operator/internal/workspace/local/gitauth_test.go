package local

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
)

// TestCommandGitAuth: the local runtime passes git credentials in the
// environment the agent decodes (gitauth), with the operator's known_hosts
// for an SSH key without its own, and masks the secret values.
func TestCommandGitAuth(t *testing.T) {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "git"},
		Data: map[string][]byte{"key": []byte("KEY-SECRET"), "pw": []byte("PW-SECRET"), "app-key": []byte("PEM-SECRET")}}
	r := &Runtime{Client: fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(sec).Build(), SSHKnownHosts: "host ssh-ed25519 AAAA"}
	sel := func(key string) *corev1.SecretKeySelector {
		return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "git"}, Key: key}
	}
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w"}, Spec: autov1alpha1.WorkspaceSpec{
		Git: &autov1alpha1.GitSource{URL: "ssh://git@host/r.git", Ref: "main", Auth: &autov1alpha1.GitAuth{SSHPrivateKey: sel("key"), Password: sel("pw")}}}}
	own, _, secrets, err := r.command(context.Background(), ws, t.TempDir(), "tok")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"GIT_SSH_PRIVATE_KEY=KEY-SECRET", "GIT_PASSWORD=PW-SECRET", "GIT_SSH_KNOWN_HOSTS=host ssh-ed25519 AAAA"} {
		if !slices.Contains(own, want) {
			t.Errorf("environment lacks %s: %q", want, own)
		}
	}
	for _, s := range []string{"KEY-SECRET", "PW-SECRET"} {
		if !slices.Contains(secrets, s) {
			t.Errorf("%s is not masked", s)
		}
	}

	ws.Spec.Git.Auth = &autov1alpha1.GitAuth{GitHubApp: &autov1alpha1.GitHubAppAuth{AppID: sel("missing"), InstallationID: sel("pw"), PrivateKey: sel("app-key")}}
	_, _, _, err = r.command(context.Background(), ws, t.TempDir(), "tok")
	if err == nil || !strings.Contains(err.Error(), "githubApp.appID") || !strings.Contains(err.Error(), "has no key missing") {
		t.Fatalf("missing key: %v", err)
	}
}
