package stack

import (
	"fmt"
	"sort"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// CrossNamespaceRefs refuses Secret references to another namespace. The
// API keeps secretRef.namespace from PKO, deprecated, where only the Stack's
// own namespace is allowed; Stackflow always reads a Stack's Secrets from
// its namespace, so a reference elsewhere would silently read a Secret of
// the same name here. It is a spec error naming each such field instead:
// no Stack can reach a Secret outside its namespace.
func CrossNamespaceRefs(s *pulumiv1.Stack) error {
	var bad []string
	check := func(field string, r *pulumiv1.ResourceRef) {
		if r != nil && r.SecretRef != nil && r.SecretRef.Namespace != "" && r.SecretRef.Namespace != s.Namespace {
			bad = append(bad, fmt.Sprintf("%s (namespace %s)", field, r.SecretRef.Namespace))
		}
	}
	for name, r := range s.Spec.SecretRefs {
		check("secretsRef."+name, &r)
	}
	for name, r := range s.Spec.EnvRefs {
		check("envRefs."+name, &r)
	}
	if s.Spec.GitSource != nil && s.Spec.GitAuth != nil {
		ga := s.Spec.GitAuth
		check("gitAuth.accessToken", ga.PersonalAccessToken)
		if b := ga.BasicAuth; b != nil {
			check("gitAuth.basicAuth.userName", &b.UserName)
			check("gitAuth.basicAuth.password", &b.Password)
		}
		if k := ga.SSHAuth; k != nil {
			check("gitAuth.sshAuth.sshPrivateKey", &k.SSHPrivateKey)
			check("gitAuth.sshAuth.password", k.Password)
		}
		if app := ga.GitHubApp; app != nil {
			check("gitAuth.githubApp.appID", &app.AppID)
			check("gitAuth.githubApp.installationID", &app.InstallationID)
			check("gitAuth.githubApp.privateKey", &app.PrivateKey)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return specErrorf("secret references must be in the Stack's namespace %s: %v; remove their namespace field", s.Namespace, bad)
}
