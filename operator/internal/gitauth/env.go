package gitauth

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
)

// The environment variables a workspace runtime sets and the agent reads
// (FromEnv). Secret ones are read from Secret keys by the pod runtime, never
// written into the pod spec.
const (
	EnvSSHPrivateKey           = "GIT_SSH_PRIVATE_KEY"
	EnvUsername                = "GIT_USERNAME"
	EnvPassword                = "GIT_PASSWORD"
	EnvToken                   = "GIT_TOKEN"
	EnvKnownHosts              = "GIT_SSH_KNOWN_HOSTS"
	EnvGitHubAppID             = "GITHUB_APP_ID"
	EnvGitHubAppInstallationID = "GITHUB_APP_INSTALLATION_ID"
	EnvGitHubAppPrivateKey     = "GITHUB_APP_PRIVATE_KEY"
	EnvGitHubAppAPIURL         = "GITHUB_APP_API_URL"
)

// variable is one credential: its environment variable, its field under a
// Workspace's spec.git.auth, where it is read from (a Secret key, or a plain
// value) and where its value goes in Credentials.
type variable struct {
	env, field string
	sel        *corev1.SecretKeySelector
	plain      string
	required   bool
	dst        *string
}

// variables lists the credentials auth refers to, pointing into c (whose
// GitHubApp is allocated when auth has one).
func variables(auth *autov1alpha1.GitAuth, c *Credentials) []variable {
	vs := []variable{
		{env: EnvSSHPrivateKey, field: "sshPrivateKey", sel: auth.SSHPrivateKey, dst: &c.SSHPrivateKey},
		{env: EnvUsername, field: "username", sel: auth.Username, dst: &c.Username},
		{env: EnvPassword, field: "password", sel: auth.Password, dst: &c.Password},
		{env: EnvToken, field: "token", sel: auth.Token, dst: &c.Token},
		{env: EnvKnownHosts, field: "knownHosts", sel: auth.KnownHosts, dst: &c.KnownHosts},
	}
	if app := auth.GitHubApp; app != nil {
		c.GitHubApp = &GitHubApp{}
		vs = append(vs,
			variable{env: EnvGitHubAppID, field: "githubApp.appID", sel: app.AppID, required: true, dst: &c.GitHubApp.AppID},
			variable{env: EnvGitHubAppInstallationID, field: "githubApp.installationID", sel: app.InstallationID, required: true, dst: &c.GitHubApp.InstallationID},
			variable{env: EnvGitHubAppPrivateKey, field: "githubApp.privateKey", sel: app.PrivateKey, required: true, dst: &c.GitHubApp.PrivateKey},
			variable{env: EnvGitHubAppAPIURL, field: "githubApp.apiURL", plain: app.APIURL, dst: &c.GitHubApp.APIURL},
		)
	}
	return vs
}

// check reports a missing required reference or one without name and key.
func (v variable) check() error {
	if v.sel == nil {
		if v.required {
			return &CredentialsError{msg: fmt.Sprintf("spec.git.auth.%s is required", v.field)}
		}
		return nil
	}
	if v.sel.Name == "" || v.sel.Key == "" {
		return &CredentialsError{msg: fmt.Sprintf("spec.git.auth.%s needs a secret name and key", v.field)}
	}
	return nil
}

// usesSSH: the operator's known_hosts is passed on only with an SSH key.
func usesSSH(auth *autov1alpha1.GitAuth) bool { return auth != nil && auth.SSHPrivateKey != nil }

// Read reads the credentials auth refers to with read (a Secret key's
// value). knownHosts, the operator's --ssh-known-hosts, serves when auth names
// no known_hosts of its own. A nil auth is no credentials.
func Read(auth *autov1alpha1.GitAuth, knownHosts string, read func(*corev1.SecretKeySelector) (string, error)) (Credentials, error) {
	var c Credentials
	if auth == nil {
		return c, nil
	}
	for _, v := range variables(auth, &c) {
		if err := v.check(); err != nil {
			return Credentials{}, err
		}
		switch {
		case v.sel != nil:
			val, err := read(v.sel)
			if err != nil {
				return Credentials{}, fmt.Errorf("git credentials %s: %w", v.field, err)
			}
			*v.dst = val
		case v.plain != "":
			*v.dst = v.plain
		}
	}
	if c.KnownHosts == "" && usesSSH(auth) {
		c.KnownHosts = knownHosts
	}
	if a := c.GitHubApp; a != nil {
		// IDs in Secrets often end with a newline (echo … > file).
		a.AppID, a.InstallationID = strings.TrimSpace(a.AppID), strings.TrimSpace(a.InstallationID)
	}
	return c, nil
}

// PodEnv is the agent container's environment for auth: each credential a
// variable read from its Secret key by the kubelet, plain values as values,
// and knownHosts (the operator's --ssh-known-hosts content) when auth uses an
// SSH key and names no known_hosts of its own.
func PodEnv(auth *autov1alpha1.GitAuth, knownHosts string) ([]corev1.EnvVar, error) {
	if auth == nil {
		return nil, nil
	}
	var env []corev1.EnvVar
	var errs []error
	var sink Credentials
	for _, v := range variables(auth, &sink) {
		if err := v.check(); err != nil {
			errs = append(errs, err)
			continue
		}
		switch {
		case v.sel != nil:
			env = append(env, corev1.EnvVar{Name: v.env, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: v.sel.DeepCopy()}})
		case v.plain != "":
			env = append(env, corev1.EnvVar{Name: v.env, Value: v.plain})
		}
	}
	if auth.KnownHosts == nil && usesSSH(auth) && knownHosts != "" {
		env = append(env, corev1.EnvVar{Name: EnvKnownHosts, Value: knownHosts})
	}
	return env, errors.Join(errs...)
}

// Env encodes c as the environment variables FromEnv decodes (empty values
// are left out).
func (c Credentials) Env() map[string]string {
	env := map[string]string{}
	set := func(k, v string) {
		if v != "" {
			env[k] = v
		}
	}
	set(EnvSSHPrivateKey, c.SSHPrivateKey)
	set(EnvUsername, c.Username)
	set(EnvPassword, c.Password)
	set(EnvToken, c.Token)
	set(EnvKnownHosts, c.KnownHosts)
	if a := c.GitHubApp; a != nil {
		set(EnvGitHubAppID, a.AppID)
		set(EnvGitHubAppInstallationID, a.InstallationID)
		set(EnvGitHubAppPrivateKey, a.PrivateKey)
		set(EnvGitHubAppAPIURL, a.APIURL)
	}
	return env
}

// FromEnv decodes the credentials a runtime passed in the environment
// (getenv is os.Getenv in the agent). GitHub App variables must come
// together; an error names the variables, never a value.
func FromEnv(getenv func(string) string) (Credentials, error) {
	c := Credentials{
		SSHPrivateKey: getenv(EnvSSHPrivateKey),
		Username:      getenv(EnvUsername),
		Password:      getenv(EnvPassword),
		Token:         getenv(EnvToken),
		KnownHosts:    getenv(EnvKnownHosts),
	}
	app := GitHubApp{
		AppID:          strings.TrimSpace(getenv(EnvGitHubAppID)),
		InstallationID: strings.TrimSpace(getenv(EnvGitHubAppInstallationID)),
		PrivateKey:     getenv(EnvGitHubAppPrivateKey),
		APIURL:         strings.TrimSpace(getenv(EnvGitHubAppAPIURL)),
	}
	if app == (GitHubApp{}) {
		return c, nil
	}
	var missing []string
	for name, v := range map[string]string{EnvGitHubAppID: app.AppID, EnvGitHubAppInstallationID: app.InstallationID, EnvGitHubAppPrivateKey: app.PrivateKey} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return Credentials{}, fmt.Errorf("GitHub App credentials are incomplete: %s not set", strings.Join(missing, ", "))
	}
	if err := app.validateFields(); err != nil {
		return Credentials{}, err
	}
	c.GitHubApp = &app
	return c, nil
}
