package local

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

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
	r.PrepareTimeout = 40 * time.Minute
	own, creds, args, secrets, err := r.command(context.Background(), ws, t.TempDir(), "tok")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(args, "--prepare-timeout=40m0s") {
		t.Errorf("the agent's arguments lack the operator's prepare timeout: %q", args)
	}
	for _, want := range []string{"GIT_SSH_PRIVATE_KEY=KEY-SECRET", "GIT_PASSWORD=PW-SECRET", "GIT_SSH_KNOWN_HOSTS=host ssh-ed25519 AAAA"} {
		if !slices.Contains(creds, want) {
			t.Errorf("environment lacks %s: %q", want, creds)
		}
	}
	for _, v := range own {
		if strings.Contains(v, "SECRET") {
			t.Errorf("a credential is among the hashed variables: %s", v)
		}
	}
	for _, s := range []string{"KEY-SECRET", "PW-SECRET"} {
		if !slices.Contains(secrets, s) {
			t.Errorf("%s is not masked", s)
		}
	}

	ws.Spec.Git.Auth = &autov1alpha1.GitAuth{GitHubApp: &autov1alpha1.GitHubAppAuth{AppID: sel("missing"), InstallationID: sel("pw"), PrivateKey: sel("app-key")}}
	_, _, _, _, err = r.command(context.Background(), ws, t.TempDir(), "tok")
	if err == nil || !strings.Contains(err.Error(), "githubApp.appID") || !strings.Contains(err.Error(), "has no key missing") {
		t.Fatalf("missing key: %v", err)
	}
}

// TestRotatedCredentialKeepsTheAgent: a new value in a git credential's
// Secret does not make the running agent out of date (the Workspace
// controller sends the current credentials with each Checkout); another
// reference does, as it changes the pod runtime's template.
func TestRotatedCredentialKeepsTheAgent(t *testing.T) {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "git"}, Data: map[string][]byte{"token": []byte("TOKEN-ONE")}}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(sec).Build()
	r := &Runtime{Client: c}
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w"}, Spec: autov1alpha1.WorkspaceSpec{
		Git: &autov1alpha1.GitSource{URL: "https://host/r.git", Ref: "main", Auth: &autov1alpha1.GitAuth{
			Token: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "git"}, Key: "token"}}}}}
	hash := func() (string, []string) {
		t.Helper()
		own, creds, args, _, err := r.command(context.Background(), ws, "/w", "tok")
		if err != nil {
			t.Fatal(err)
		}
		return agentHash(ws, own, args), creds
	}
	before, creds := hash()
	if !slices.Contains(creds, "GIT_TOKEN=TOKEN-ONE") {
		t.Fatalf("credentials at start = %q", creds)
	}
	sec.Data["token"] = []byte("TOKEN-TWO")
	if err := c.Update(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	after, creds := hash()
	if after != before {
		t.Fatal("a rotated credential value replaces the agent")
	}
	if !slices.Contains(creds, "GIT_TOKEN=TOKEN-TWO") {
		t.Fatalf("a restarted agent would start with %q, not the current token", creds)
	}
	ws.Spec.Git.Auth.Token.Key = "other"
	sec.Data["other"] = []byte("TOKEN-THREE")
	if err := c.Update(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	if moved, _ := hash(); moved == before {
		t.Fatal("another credential reference keeps the agent")
	}
}

// TestCommandEnvPrecedence: the local agent's environment resolves a name
// set twice as a workspace pod's container does: envFrom below the git
// credentials, spec.env above them, and the agent's token above everything
// (spec.env may not name it; an envFrom key named so does not replace it).
func TestCommandEnvPrecedence(t *testing.T) {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "git"}, Data: map[string][]byte{"pw": []byte("PW-SECRET"), "user": []byte("bot")}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "env"},
		Data: map[string]string{"GIT_PASSWORD": "from-envFrom", "GIT_USERNAME": "from-envFrom", "STACKFLOW_AGENT_TOKEN": "from-envFrom", "OTHER": "kept"}}
	r := &Runtime{Client: fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(sec, cm).Build()}
	sel := func(key string) *corev1.SecretKeySelector {
		return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "git"}, Key: key}
	}
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w"}, Spec: autov1alpha1.WorkspaceSpec{
		Git:     &autov1alpha1.GitSource{URL: "https://host/r.git", Ref: "main", Auth: &autov1alpha1.GitAuth{Username: sel("user"), Password: sel("pw")}},
		EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "env"}}}},
		Env:     []corev1.EnvVar{{Name: "GIT_USERNAME", Value: "from-spec-env"}},
	}}
	own, creds, _, _, err := r.command(context.Background(), ws, t.TempDir(), "tok")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range slices.Concat(creds, own) {
		k, v, _ := strings.Cut(kv, "=")
		if old, dup := env[k]; dup {
			t.Errorf("%s is defined twice (%q, %q): the agent would see the last", k, old, v)
		}
		env[k] = v
	}
	for k, want := range map[string]string{"GIT_PASSWORD": "PW-SECRET", "GIT_USERNAME": "from-spec-env", "STACKFLOW_AGENT_TOKEN": "tok", "OTHER": "kept"} {
		if env[k] != want {
			t.Errorf("%s = %q, want %q", k, env[k], want)
		}
	}

	ws.Spec.Env = append(ws.Spec.Env, corev1.EnvVar{Name: "STACKFLOW_AGENT_TOKEN", Value: "mine"})
	if _, _, _, _, err := r.command(context.Background(), ws, t.TempDir(), "tok"); err == nil || !strings.Contains(err.Error(), "reserved for the agent's token") {
		t.Errorf("spec.env naming the agent's token: %v, want it refused", err)
	}
}
