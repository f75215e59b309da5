package stack

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/stackflow-io/stackflow/internal/stackref"
	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
)

// foreign: r names a namespace other than the Stack's.
func foreign(s *pulumiv1.Stack, r stackref.Ref) bool {
	return r.Namespace != "" && r.Namespace != s.Namespace
}

// CrossNamespaceRefs refuses references to another namespace. The API keeps
// secretRef.namespace from PKO, deprecated, where only the Stack's own
// namespace is allowed; Stackflow always reads a Stack's Secrets from its
// namespace, so a reference elsewhere would silently read a Secret of the
// same name here. It is a spec error naming each such field instead: no
// Stack can reach a Secret outside its namespace. (The CRD cannot refuse it
// at admission: its validation rules do not see the object's namespace.)
func CrossNamespaceRefs(s *pulumiv1.Stack) error {
	var bad []string
	for _, r := range stackref.Refs(s) {
		if foreign(s, r) {
			bad = append(bad, fmt.Sprintf("%s (namespace %s)", r.Path(), r.Namespace))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return specErrorf("secret references must be in the Stack's namespace %s: %v; remove their namespace field", s.Namespace, bad)
}

// GitAuth maps spec.gitAuth to the Workspace's git credentials, Secret
// references only (nil when the Stack has no git source or no gitAuth). A
// reference of another type, or to another namespace, and a
// githubApp.apiURL that gitauth.CheckAPIURL refuses (apiHosts, when given,
// are the hosts it may name) are a SpecError naming the field.
func GitAuth(s *pulumiv1.Stack, apiHosts []string) (*autov1alpha1.GitAuth, error) {
	if s.Spec.GitSource == nil || s.Spec.GitAuth == nil {
		return nil, nil
	}
	out := &autov1alpha1.GitAuth{}
	if app := s.Spec.GitAuth.GitHubApp; app != nil {
		out.GitHubApp = &autov1alpha1.GitHubAppAuth{APIURL: app.APIURL}
		if err := gitauth.CheckAPIURL(app.APIURL, apiHosts); err != nil {
			return nil, &SpecError{Msg: err.Error()}
		}
	}
	var errs []string
	for _, r := range stackref.Refs(s) {
		slot := gitAuthSlot(out, r.Field)
		if slot == nil {
			continue
		}
		what := strings.TrimPrefix(r.Field, stackref.GitAuthPrefix)
		switch {
		case r.Kind != stackref.KindSecret || r.Name == "":
			errs = append(errs, fmt.Sprintf("gitAuth %s: only type Secret is supported, got %s", what, r.Kind))
		case foreign(s, r):
			errs = append(errs, fmt.Sprintf("gitAuth %s: the Secret must be in the Stack's namespace %s, not %s; remove its namespace field", what, s.Namespace, r.Namespace))
		default:
			*slot = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: r.Name}, Key: r.Key}
		}
	}
	if len(errs) > 0 {
		return nil, &SpecError{Msg: strings.Join(errs, "; ")}
	}
	return out, nil
}

// gitAuthSlot is where the credential of a gitAuth field goes; nil for any
// other field.
func gitAuthSlot(a *autov1alpha1.GitAuth, field string) **corev1.SecretKeySelector {
	switch field {
	case stackref.FieldGitAuthAccessToken:
		return &a.Token
	case stackref.FieldGitAuthUserName:
		return &a.Username
	case stackref.FieldGitAuthPassword, stackref.FieldGitAuthSSHPassword:
		return &a.Password
	case stackref.FieldGitAuthSSHPrivateKey:
		return &a.SSHPrivateKey
	case stackref.FieldGitAuthKnownHosts:
		return &a.KnownHosts
	}
	if a.GitHubApp == nil {
		return nil
	}
	switch field {
	case stackref.FieldGitHubAppID:
		return &a.GitHubApp.AppID
	case stackref.FieldGitHubAppInstallationID:
		return &a.GitHubApp.InstallationID
	case stackref.FieldGitHubAppPrivateKey:
		return &a.GitHubApp.PrivateKey
	}
	return nil
}
