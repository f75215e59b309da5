package stack

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

func TestCrossNamespaceRefs(t *testing.T) {
	cases := []struct {
		name string
		spec func(*pulumiv1.StackSpec)
		want []string // substrings of the error; none: accepted
	}{
		{name: "no references", spec: func(*pulumiv1.StackSpec) {}},
		{name: "own namespace spelled out", spec: func(s *pulumiv1.StackSpec) {
			s.SecretRefs = map[string]pulumiv1.ResourceRef{"db": nsSecretRef("team-a", "db")}
		}},
		{name: "namespace left empty", spec: func(s *pulumiv1.StackSpec) {
			s.EnvRefs = map[string]pulumiv1.ResourceRef{"TOKEN": nsSecretRef("", "tok")}
		}},
		{name: "secretsRef and envRefs elsewhere", spec: func(s *pulumiv1.StackSpec) {
			s.SecretRefs = map[string]pulumiv1.ResourceRef{"db": nsSecretRef("team-b", "db")}
			s.EnvRefs = map[string]pulumiv1.ResourceRef{"TOKEN": nsSecretRef("kube-system", "tok")}
		}, want: []string{"namespace team-a", "envRefs.TOKEN (namespace kube-system)", "secretsRef.db (namespace team-b)", "remove their namespace field"}},
		{name: "git credentials elsewhere", spec: func(s *pulumiv1.StackSpec) {
			pw := nsSecretRef("team-b", "git")
			s.GitSource = &pulumiv1.GitSource{ProjectRepo: "https://example.com/acme/app.git"}
			s.GitAuth = &pulumiv1.GitAuthConfig{
				BasicAuth: &pulumiv1.BasicAuth{UserName: nsSecretRef("", "git"), Password: nsSecretRef("team-b", "git")},
				SSHAuth:   &pulumiv1.SSHAuth{SSHPrivateKey: nsSecretRef("team-a", "key"), Password: &pw},
			}
		}, want: []string{"gitAuth.basicAuth.password (namespace team-b)", "gitAuth.sshAuth.password (namespace team-b)"}},
		// The walkers used to disagree: admission skipped knownHosts while
		// the credential mapping dropped its namespace, so the same-named
		// Secret of the Stack's namespace was read silently.
		{name: "known_hosts elsewhere", spec: func(s *pulumiv1.StackSpec) {
			kh := nsSecretRef("kube-system", "known-hosts")
			s.GitSource = &pulumiv1.GitSource{ProjectRepo: "ssh://git@example.com/app.git"}
			s.GitAuth = &pulumiv1.GitAuthConfig{SSHAuth: &pulumiv1.SSHAuth{SSHPrivateKey: nsSecretRef("", "key"), KnownHosts: &kh}}
		}, want: []string{"gitAuth.sshAuth.knownHosts (namespace kube-system)"}},
		{name: "GitHub App key elsewhere", spec: func(s *pulumiv1.StackSpec) {
			s.GitSource = &pulumiv1.GitSource{ProjectRepo: "https://example.com/app.git"}
			s.GitAuth = &pulumiv1.GitAuthConfig{GitHubApp: &pulumiv1.GitHubAppAuth{AppID: nsSecretRef("", "app"), InstallationID: nsSecretRef("", "app"), PrivateKey: nsSecretRef("platform", "app")}}
		}, want: []string{"gitAuth.githubApp.privateKey (namespace platform)"}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web"}}
			tt.spec(&s.Spec)
			err := CrossNamespaceRefs(s)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var spec *SpecError
			if !errors.As(err, &spec) {
				t.Fatalf("err = %v, want a SpecError", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "userName") || strings.Contains(err.Error(), "sshPrivateKey") {
				t.Errorf("%q names a reference in the Stack's own namespace", err)
			}
		})
	}
}

func sel(name, key string) *corev1.SecretKeySelector {
	return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

// TestGitAuth: spec.gitAuth maps to the Workspace's Secret references from
// the one walk; a reference it cannot map, one to another namespace, and a
// refused apiURL are spec errors naming the field.
func TestGitAuth(t *testing.T) {
	ref := func(name, key string) pulumiv1.ResourceRef { return secretRef(name, key) }
	refp := func(name, key string) *pulumiv1.ResourceRef { r := secretRef(name, key); return &r }
	stackWith := func(ga *pulumiv1.GitAuthConfig) *pulumiv1.Stack {
		return &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a"}, Spec: pulumiv1.StackSpec{GitSource: &pulumiv1.GitSource{ProjectRepo: "https://x", GitAuth: ga}}}
	}
	kh := nsSecretRef("kube-system", "known-hosts")
	own := nsSecretRef("team-a", "known-hosts")
	for _, tc := range []struct {
		name  string
		s     *pulumiv1.Stack
		hosts []string
		want  *autov1alpha1.GitAuth
		err   string
	}{
		{name: "no git source", s: &pulumiv1.Stack{}},
		{name: "no gitAuth", s: stackWith(nil)},
		{name: "token", s: stackWith(&pulumiv1.GitAuthConfig{PersonalAccessToken: refp("s", "t")}), want: &autov1alpha1.GitAuth{Token: sel("s", "t")}},
		{name: "basic", s: stackWith(&pulumiv1.GitAuthConfig{BasicAuth: &pulumiv1.BasicAuth{UserName: ref("s", "u"), Password: ref("s", "p")}}),
			want: &autov1alpha1.GitAuth{Username: sel("s", "u"), Password: sel("s", "p")}},
		{name: "ssh", s: stackWith(&pulumiv1.GitAuthConfig{SSHAuth: &pulumiv1.SSHAuth{SSHPrivateKey: ref("s", "k"), Password: refp("s", "p"), KnownHosts: refp("h", "known_hosts")}}),
			want: &autov1alpha1.GitAuth{SSHPrivateKey: sel("s", "k"), Password: sel("s", "p"), KnownHosts: sel("h", "known_hosts")}},
		{name: "known_hosts in the Stack's namespace, spelled out", s: stackWith(&pulumiv1.GitAuthConfig{SSHAuth: &pulumiv1.SSHAuth{SSHPrivateKey: ref("s", "k"), KnownHosts: &own}}),
			want: &autov1alpha1.GitAuth{SSHPrivateKey: sel("s", "k"), KnownHosts: sel("known-hosts", "k")}},
		{name: "known_hosts in another namespace", s: stackWith(&pulumiv1.GitAuthConfig{SSHAuth: &pulumiv1.SSHAuth{SSHPrivateKey: ref("s", "k"), KnownHosts: &kh}}),
			err: "gitAuth sshAuth.knownHosts: the Secret must be in the Stack's namespace team-a, not kube-system; remove its namespace field"},
		{name: "github app", hosts: []string{"ghe"}, s: stackWith(&pulumiv1.GitAuthConfig{GitHubApp: &pulumiv1.GitHubAppAuth{AppID: ref("a", "id"), InstallationID: ref("a", "i"), PrivateKey: ref("a", "k"), APIURL: "https://ghe/api/v3"}}),
			want: &autov1alpha1.GitAuth{GitHubApp: &autov1alpha1.GitHubAppAuth{AppID: sel("a", "id"), InstallationID: sel("a", "i"), PrivateKey: sel("a", "k"), APIURL: "https://ghe/api/v3"}}},
		{name: "github app, apiURL with a query", s: stackWith(&pulumiv1.GitAuthConfig{GitHubApp: &pulumiv1.GitHubAppAuth{AppID: ref("a", "id"), InstallationID: ref("a", "i"), PrivateKey: ref("a", "k"), APIURL: "https://internal/admin?"}}),
			err: "githubApp.apiURL must be https://"},
		{name: "github app, apiURL host not allowed", hosts: []string{"ghe.example.com"},
			s:   stackWith(&pulumiv1.GitAuthConfig{GitHubApp: &pulumiv1.GitHubAppAuth{AppID: ref("a", "id"), InstallationID: ref("a", "i"), PrivateKey: ref("a", "k"), APIURL: "https://ghe.internal/api/v3"}}),
			err: "host ghe.internal is not one Stackflow may reach for GitHub Apps: api.github.com, and the GitHub Enterprise Server hosts of --github-api-hosts (ghe.example.com)"},
		{name: "github app, apiURL host of none allowed", s: stackWith(&pulumiv1.GitAuthConfig{GitHubApp: &pulumiv1.GitHubAppAuth{AppID: ref("a", "id"), InstallationID: ref("a", "i"), PrivateKey: ref("a", "k"), APIURL: "https://10.0.0.1:22"}}),
			err: "host 10.0.0.1:22 is not one Stackflow may reach for GitHub Apps"},
		{name: "not a secret", s: stackWith(&pulumiv1.GitAuthConfig{SSHAuth: &pulumiv1.SSHAuth{SSHPrivateKey: ref("s", "k"), KnownHosts: &pulumiv1.ResourceRef{SelectorType: pulumiv1.ResourceSelectorLiteral}}}),
			err: "gitAuth sshAuth.knownHosts: only type Secret is supported, got Literal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := GitAuth(tc.s, tc.hosts)
			if tc.err != "" {
				var se *SpecError
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.As(err, &se) {
					t.Fatalf("err = %v, want a SpecError saying %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("GitAuth = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func nsSecretRef(ns, name string) pulumiv1.ResourceRef {
	return pulumiv1.ResourceRef{SelectorType: pulumiv1.ResourceSelectorSecret,
		ResourceSelector: pulumiv1.ResourceSelector{SecretRef: &pulumiv1.SecretSelector{Namespace: ns, Name: name, Key: "k"}}}
}
