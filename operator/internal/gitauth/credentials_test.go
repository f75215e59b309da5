package gitauth

import (
	"reflect"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/test/gitrepo"
)

var (
	keyOnce sync.Once
	fuzzKey ssh.PublicKey
)

func testKey(t *testing.T) ssh.PublicKey {
	keyOnce.Do(func() { fuzzKey = gitrepo.NewSSHKey(t).Public })
	return fuzzKey
}

func ref(name, key string) pulumiv1.ResourceRef {
	return pulumiv1.ResourceRef{SelectorType: pulumiv1.ResourceSelectorSecret, ResourceSelector: pulumiv1.ResourceSelector{SecretRef: &pulumiv1.SecretSelector{Name: name, Key: key}}}
}

func refp(name, key string) *pulumiv1.ResourceRef { r := ref(name, key); return &r }

func TestFromStack(t *testing.T) {
	stackWith := func(ga *pulumiv1.GitAuthConfig) *pulumiv1.Stack {
		return &pulumiv1.Stack{Spec: pulumiv1.StackSpec{GitSource: &pulumiv1.GitSource{ProjectRepo: "https://x", GitAuth: ga}}}
	}
	for _, tc := range []struct {
		name string
		s    *pulumiv1.Stack
		want *autov1alpha1.GitAuth
		err  string
	}{
		{"no git source", &pulumiv1.Stack{}, nil, ""},
		{"no gitAuth", stackWith(nil), nil, ""},
		{"token", stackWith(&pulumiv1.GitAuthConfig{PersonalAccessToken: refp("s", "t")}), &autov1alpha1.GitAuth{Token: sel("s", "t")}, ""},
		{"basic", stackWith(&pulumiv1.GitAuthConfig{BasicAuth: &pulumiv1.BasicAuth{UserName: ref("s", "u"), Password: ref("s", "p")}}),
			&autov1alpha1.GitAuth{Username: sel("s", "u"), Password: sel("s", "p")}, ""},
		{"ssh", stackWith(&pulumiv1.GitAuthConfig{SSHAuth: &pulumiv1.SSHAuth{SSHPrivateKey: ref("s", "k"), Password: refp("s", "p"), KnownHosts: refp("h", "known_hosts")}}),
			&autov1alpha1.GitAuth{SSHPrivateKey: sel("s", "k"), Password: sel("s", "p"), KnownHosts: sel("h", "known_hosts")}, ""},
		{"github app", stackWith(&pulumiv1.GitAuthConfig{GitHubApp: &pulumiv1.GitHubAppAuth{AppID: ref("a", "id"), InstallationID: ref("a", "i"), PrivateKey: ref("a", "k"), APIURL: "https://ghe/api/v3"}}),
			&autov1alpha1.GitAuth{GitHubApp: &autov1alpha1.GitHubAppAuth{AppID: sel("a", "id"), InstallationID: sel("a", "i"), PrivateKey: sel("a", "k"), APIURL: "https://ghe/api/v3"}}, ""},
		{"not a secret", stackWith(&pulumiv1.GitAuthConfig{SSHAuth: &pulumiv1.SSHAuth{SSHPrivateKey: ref("s", "k"), KnownHosts: &pulumiv1.ResourceRef{SelectorType: pulumiv1.ResourceSelectorLiteral}}}),
			nil, "gitAuth sshAuth.knownHosts: only type Secret is supported, got Literal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromStack(tc.s)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("FromStack = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestFromLegacySecret(t *testing.T) {
	b := []byte("x")
	for _, tc := range []struct {
		name string
		data map[string][]byte
		want *autov1alpha1.GitAuth
		err  string
	}{
		{"token", map[string][]byte{"accessToken": b}, &autov1alpha1.GitAuth{Token: sel("legacy", "accessToken")}, ""},
		{"basic", map[string][]byte{"username": b, "password": b}, &autov1alpha1.GitAuth{Username: sel("legacy", "username"), Password: sel("legacy", "password")}, ""},
		{"ssh with password and known hosts", map[string][]byte{"sshPrivateKey": b, "password": b, "knownHosts": b},
			&autov1alpha1.GitAuth{SSHPrivateKey: sel("legacy", "sshPrivateKey"), Password: sel("legacy", "password"), KnownHosts: sel("legacy", "knownHosts")}, ""},
		{"none", map[string][]byte{"token": []byte("secret-value")}, nil, "gitAuthSecret legacy has none of the keys accessToken, username/password, sshPrivateKey (it has: token)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromLegacySecret("legacy", tc.data)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("= %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestFingerprintAndSecrets(t *testing.T) {
	a := Credentials{Token: "t", GitHubApp: &GitHubApp{AppID: "1", InstallationID: "2", PrivateKey: "PEM"}}
	b := a
	b.GitHubApp = &GitHubApp{AppID: "1", InstallationID: "3", PrivateKey: "PEM"}
	if a.Fingerprint() == b.Fingerprint() || a.Fingerprint() != (Credentials{Token: "t", GitHubApp: &GitHubApp{AppID: "1", InstallationID: "2", PrivateKey: "PEM"}}).Fingerprint() {
		t.Fatal("fingerprints do not tell credentials apart")
	}
	if got := a.Secrets(); !reflect.DeepEqual(got, []string{"t", "PEM"}) {
		t.Fatalf("Secrets = %v", got)
	}
	_ = corev1.SecretKeySelector{}
}
