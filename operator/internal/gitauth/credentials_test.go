package gitauth

import (
	"reflect"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

var (
	keyOnce sync.Once
	fuzzKey ssh.PublicKey
)

func testKey(t *testing.T) ssh.PublicKey {
	keyOnce.Do(func() { fuzzKey = gitrepo.NewSSHKey(t).Public })
	return fuzzKey
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
