package gitauth

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
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
