package stack

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

func nsSecretRef(ns, name string) pulumiv1.ResourceRef {
	return pulumiv1.ResourceRef{SelectorType: pulumiv1.ResourceSelectorSecret,
		ResourceSelector: pulumiv1.ResourceSelector{SecretRef: &pulumiv1.SecretSelector{Namespace: ns, Name: name, Key: "k"}}}
}

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
