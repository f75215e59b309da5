package gitauth

import (
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
)

func sel(name, key string) *corev1.SecretKeySelector {
	return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

func app() *autov1alpha1.GitHubAppAuth {
	return &autov1alpha1.GitHubAppAuth{AppID: sel("app", "id"), InstallationID: sel("app", "inst"), PrivateKey: sel("app", "key.pem")}
}

// TestReadAndPodEnv: both runtimes and the resolver read the same
// references; the pod gets Secret references (never a value), and the
// operator's known_hosts only with an SSH key and no knownHosts of its own.
func TestReadAndPodEnv(t *testing.T) {
	secrets := map[string]string{"git/token": "tok", "git/user": "me", "git/pw": "pw", "git/key": "KEY", "git/kh": "KH",
		"app/id": "1", "app/inst": "2\n", "app/key.pem": "PEM"}
	read := func(s *corev1.SecretKeySelector) (string, error) {
		v, ok := secrets[s.Name+"/"+s.Key]
		if !ok {
			return "", errors.New("secret " + s.Name + " has no key " + s.Key)
		}
		return v, nil
	}
	withURL := app()
	withURL.APIURL = "https://ghe.example/api/v3"
	for _, tc := range []struct {
		name       string
		auth       *autov1alpha1.GitAuth
		operatorKH string
		want       Credentials
		env        map[string]string // name → "secret/key" or "=value"
		err        string
	}{
		{name: "nil", auth: nil, want: Credentials{}},
		{name: "token", auth: &autov1alpha1.GitAuth{Token: sel("git", "token")}, operatorKH: "OP",
			want: Credentials{Token: "tok"}, env: map[string]string{EnvToken: "git/token"}},
		{name: "basic", auth: &autov1alpha1.GitAuth{Username: sel("git", "user"), Password: sel("git", "pw")},
			want: Credentials{Username: "me", Password: "pw"}, env: map[string]string{EnvUsername: "git/user", EnvPassword: "git/pw"}},
		{name: "ssh with its known_hosts", auth: &autov1alpha1.GitAuth{SSHPrivateKey: sel("git", "key"), Password: sel("git", "pw"), KnownHosts: sel("git", "kh")}, operatorKH: "OP",
			want: Credentials{SSHPrivateKey: "KEY", Password: "pw", KnownHosts: "KH"},
			env:  map[string]string{EnvSSHPrivateKey: "git/key", EnvPassword: "git/pw", EnvKnownHosts: "git/kh"}},
		{name: "ssh with the operator's known_hosts", auth: &autov1alpha1.GitAuth{SSHPrivateKey: sel("git", "key")}, operatorKH: "OP",
			want: Credentials{SSHPrivateKey: "KEY", KnownHosts: "OP"}, env: map[string]string{EnvSSHPrivateKey: "git/key", EnvKnownHosts: "=OP"}},
		{name: "ssh with no known_hosts", auth: &autov1alpha1.GitAuth{SSHPrivateKey: sel("git", "key")},
			want: Credentials{SSHPrivateKey: "KEY"}, env: map[string]string{EnvSSHPrivateKey: "git/key"}},
		{name: "github app", auth: &autov1alpha1.GitAuth{GitHubApp: withURL},
			want: Credentials{GitHubApp: &GitHubApp{AppID: "1", InstallationID: "2", PrivateKey: "PEM", APIURL: "https://ghe.example/api/v3"}},
			env: map[string]string{EnvGitHubAppID: "app/id", EnvGitHubAppInstallationID: "app/inst", EnvGitHubAppPrivateKey: "app/key.pem",
				EnvGitHubAppAPIURL: "=https://ghe.example/api/v3"}},
		{name: "github app without its key", auth: &autov1alpha1.GitAuth{GitHubApp: &autov1alpha1.GitHubAppAuth{AppID: sel("app", "id"), InstallationID: sel("app", "inst")}},
			err: "spec.git.auth.githubApp.privateKey is required"},
		{name: "reference without a key", auth: &autov1alpha1.GitAuth{Token: sel("git", "")}, err: "spec.git.auth.token needs a secret name and key"},
		{name: "missing secret key", auth: &autov1alpha1.GitAuth{Token: sel("git", "nope")}, err: "git credentials token: secret git has no key nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(tc.auth, tc.operatorKH, read)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Read err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Read = %+v, %v; want %+v", got, err, tc.want)
			}
			env, err := PodEnv(tc.auth, tc.operatorKH)
			if err != nil {
				t.Fatal(err)
			}
			gotEnv := map[string]string{}
			for _, e := range env {
				if e.ValueFrom != nil {
					gotEnv[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
				} else {
					gotEnv[e.Name] = "=" + e.Value
				}
			}
			if len(tc.env) == 0 {
				tc.env = map[string]string{}
			}
			if !reflect.DeepEqual(gotEnv, tc.env) {
				t.Fatalf("PodEnv = %v, want %v", gotEnv, tc.env)
			}
			// What the local runtime passes decodes to what was read.
			back, err := FromEnv(func(k string) string { return got.Env()[k] })
			if err != nil || !reflect.DeepEqual(back, got) {
				t.Fatalf("FromEnv(Env()) = %+v, %v; want %+v", back, err, got)
			}
		})
	}
}

func TestFromEnvIncompleteApp(t *testing.T) {
	env := map[string]string{EnvGitHubAppID: "1", EnvGitHubAppPrivateKey: "PEM-SECRET"}
	_, err := FromEnv(func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), EnvGitHubAppInstallationID+" not set") || strings.Contains(err.Error(), "PEM-SECRET") {
		t.Fatalf("err = %v", err)
	}
	env[EnvGitHubAppInstallationID] = " 12\n" // Secrets often end in a newline
	c, err := FromEnv(func(k string) string { return env[k] })
	if err != nil || c.GitHubApp.InstallationID != "12" {
		t.Fatalf("FromEnv = %+v, %v", c.GitHubApp, err)
	}
}

// FuzzFromEnv: any environment decodes or fails without panicking, an
// error never holds a value, and what decodes encodes back to itself.
func FuzzFromEnv(f *testing.F) {
	f.Add("tok", "me", "pw", "key", "kh", "1", "2", "pem", "https://api.github.com")
	f.Add("", "", "", "", "", "1", "", "", "")
	f.Add("", "", "", "", "", " 7 ", "08", "x", "ftp://x")
	f.Add("", "", "", "", "", "a", "1/../2", "k", "")
	f.Fuzz(func(t *testing.T, token, user, pw, key, kh, appID, inst, pem, api string) {
		env := map[string]string{EnvToken: token, EnvUsername: user, EnvPassword: pw, EnvSSHPrivateKey: key, EnvKnownHosts: kh,
			EnvGitHubAppID: appID, EnvGitHubAppInstallationID: inst, EnvGitHubAppPrivateKey: pem, EnvGitHubAppAPIURL: api}
		c, err := FromEnv(func(k string) string { return env[k] })
		if err != nil {
			for _, secret := range []string{token, pw, key, pem} {
				if len(secret) > 3 && strings.Contains(err.Error(), secret) {
					t.Fatalf("error %q holds a secret value %q", err, secret)
				}
			}
			return
		}
		if c.GitHubApp != nil {
			if err := c.GitHubApp.validateFields(); err != nil {
				t.Fatalf("decoded an invalid App: %v", err)
			}
			if strings.Trim(c.GitHubApp.InstallationID, "0123456789") != "" {
				t.Fatalf("installation ID %q would enter a URL path", c.GitHubApp.InstallationID)
			}
		}
		back, err := FromEnv(func(k string) string { return c.Env()[k] })
		if err != nil || !reflect.DeepEqual(back, c) {
			t.Fatalf("round trip: %+v, %v; want %+v", back, err, c)
		}
	})
}

// FuzzHostKeyCallback: any known_hosts text is accepted or refused without
// panicking, and a callback made from it answers any host.
func FuzzHostKeyCallback(f *testing.F) {
	f.Add("github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n")
	f.Add("@cert-authority *.example ssh-rsa AAAA\n|1|abc|def ssh-ed25519 AAAA\n")
	f.Add("[127.0.0.1]:22 ssh-ed25519\n#comment\n\n")
	f.Fuzz(func(t *testing.T, text string) {
		cb, err := HostKeyCallback(text)
		if err != nil {
			return
		}
		key := testKey(t)
		addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 22}
		_ = cb("127.0.0.1:22", addr, key)
		_ = cb("github.com:22", addr, key)
	})
}
