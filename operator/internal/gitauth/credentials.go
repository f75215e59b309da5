package gitauth

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// Credentials are git credentials as values. Token, Password,
// SSHPrivateKey and GitHubApp.PrivateKey are secrets.
type Credentials struct {
	// Token is an access token, sent as the basic-auth password (user
	// Username, or "git").
	Token string
	// Username and Password are basic auth; Password alone decrypts
	// SSHPrivateKey.
	Username, Password string
	// SSHPrivateKey is a PEM-encoded SSH private key.
	SSHPrivateKey string
	// KnownHosts holds known_hosts lines the SSH server's host key must
	// match (not a secret). Required with SSHPrivateKey.
	KnownHosts string
	// GitHubApp authenticates as a GitHub App installation.
	GitHubApp *GitHubApp
}

// GitHubApp is a GitHub App's credentials for one installation.
type GitHubApp struct {
	// AppID is the App's ID (the JWT's issuer).
	AppID string
	// InstallationID is the installation's numeric ID.
	InstallationID string
	// PrivateKey is the App's PEM-encoded RSA private key (a secret).
	PrivateKey string
	// APIURL is the GitHub REST API's base URL; empty for DefaultGitHubAPI.
	APIURL string
}

// DefaultGitHubAPI is GitHub.com's REST API.
const DefaultGitHubAPI = "https://api.github.com"

// Secrets are the secret values of c, for redaction.
func (c Credentials) Secrets() []string {
	var out []string
	for _, v := range []string{c.Token, c.Password, c.SSHPrivateKey} {
		if v != "" {
			out = append(out, v)
		}
	}
	if c.GitHubApp != nil && c.GitHubApp.PrivateKey != "" {
		out = append(out, c.GitHubApp.PrivateKey)
	}
	return out
}

// Fingerprint identifies c without revealing it (a keyed cache's key): equal
// credentials have equal fingerprints.
func (c Credentials) Fingerprint() string {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %q %q %q", c.Token, c.Username, c.Password, c.SSHPrivateKey, c.KnownHosts)
	if a := c.GitHubApp; a != nil {
		fmt.Fprintf(h, " app %q %q %q %q", a.AppID, a.InstallationID, a.PrivateKey, a.APIURL)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// FromStack maps a Stack's spec.gitAuth to a Workspace's Secret references
// (nil when the Stack has no git source or no gitAuth). Only references of
// type Secret are supported; an error says which field is wrong.
func FromStack(s *pulumiv1.Stack) (*autov1alpha1.GitAuth, error) {
	if s.Spec.GitSource == nil || s.Spec.GitAuth == nil {
		return nil, nil
	}
	var errs []string
	sel := func(what string, r *pulumiv1.ResourceRef) *corev1.SecretKeySelector {
		if r == nil {
			return nil
		}
		if r.SelectorType != pulumiv1.ResourceSelectorSecret || r.SecretRef == nil {
			errs = append(errs, fmt.Sprintf("gitAuth %s: only type Secret is supported, got %s", what, r.SelectorType))
			return nil
		}
		return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: r.SecretRef.Name}, Key: r.SecretRef.Key}
	}
	ga := s.Spec.GitAuth
	out := &autov1alpha1.GitAuth{Token: sel("accessToken", ga.PersonalAccessToken)}
	if b := ga.BasicAuth; b != nil {
		out.Username = sel("basicAuth.userName", &b.UserName)
		out.Password = sel("basicAuth.password", &b.Password)
	}
	if k := ga.SSHAuth; k != nil {
		out.SSHPrivateKey = sel("sshAuth.sshPrivateKey", &k.SSHPrivateKey)
		out.Password = sel("sshAuth.password", k.Password)
		out.KnownHosts = sel("sshAuth.knownHosts", k.KnownHosts)
	}
	if app := ga.GitHubApp; app != nil {
		out.GitHubApp = &autov1alpha1.GitHubAppAuth{
			AppID:          sel("githubApp.appID", &app.AppID),
			InstallationID: sel("githubApp.installationID", &app.InstallationID),
			PrivateKey:     sel("githubApp.privateKey", &app.PrivateKey),
			APIURL:         app.APIURL,
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

// Keys of the deprecated gitAuthSecret.
const (
	LegacyAccessTokenKey   = "accessToken"
	LegacyUsernameKey      = "username"
	LegacyPasswordKey      = "password"
	LegacySSHPrivateKeyKey = "sshPrivateKey"
	LegacyKnownHostsKey    = "knownHosts"
)

// FromLegacySecret maps the deprecated gitAuthSecret, a Secret name with its
// data (keys accessToken, or username and password, or sshPrivateKey with an
// optional password and knownHosts), to Secret references. Only the keys'
// presence is looked at.
func FromLegacySecret(name string, data map[string][]byte) (*autov1alpha1.GitAuth, error) {
	sel := func(key string) *corev1.SecretKeySelector {
		if _, ok := data[key]; !ok {
			return nil
		}
		return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
	}
	a := &autov1alpha1.GitAuth{Token: sel(LegacyAccessTokenKey), Username: sel(LegacyUsernameKey),
		Password: sel(LegacyPasswordKey), SSHPrivateKey: sel(LegacySSHPrivateKeyKey), KnownHosts: sel(LegacyKnownHostsKey)}
	if a.Token == nil && a.Username == nil && a.SSHPrivateKey == nil {
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return nil, fmt.Errorf("gitAuthSecret %s has none of the keys accessToken, username/password, sshPrivateKey (it has: %s)", name, strings.Join(keys, ", "))
	}
	return a, nil
}
