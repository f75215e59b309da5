package stack

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
)

// Ref is one reference of a Stack's spec to something outside it: a Secret
// or ConfigMap (key), a Program, a Flux source, a prerequisite Stack, or the
// git repository of its program.
type Ref struct {
	// Field is the spec field holding the reference (a Field* constant).
	Field string
	// Entry is the reference's map key (secretsRef, envRefs, configRef) or
	// list index (envs, envSecrets, prerequisites) within Field; empty for a
	// field holding one reference.
	Entry string
	// Kind is what is referred to: KindSecret, KindConfigMap, KindProgram,
	// KindStack, KindGit, a Flux source's kind (GitRepository,
	// OCIRepository, Bucket), or, for a ResourceRef whose value is not an
	// object's (type Literal, Env or FS), that type.
	Kind string
	// Name is the object's name (for KindGit the repository's URL); empty
	// for a ResourceRef that names no object, or an incomplete one.
	Name string
	// Namespace is the namespace the reference names, as written: empty
	// means the Stack's. Only a ResourceRef's secret selector can name one
	// (deprecated); every other reference is to the Stack's namespace by the
	// API.
	Namespace string
	// Key is the key within the Secret or ConfigMap (empty when the whole
	// object is used), or for KindGit the branch tracked (empty for a pinned
	// commit).
	Key string
}

// Kinds of Ref.
const (
	KindSecret    = "Secret"
	KindConfigMap = "ConfigMap"
	KindProgram   = "Program"
	KindStack     = "Stack"
	// KindGit is a git repository, named by its URL.
	KindGit = "Git"
)

// The spec fields holding references (Ref.Field), named as in the Stack's
// YAML.
const (
	FieldAccessTokenSecret       = "accessTokenSecret"
	FieldEnvs                    = "envs"
	FieldEnvRefs                 = "envRefs"
	FieldEnvSecrets              = "envSecrets"
	FieldConfigRef               = "configRef"
	FieldSecretsRef              = "secretsRef"
	FieldProjectRepo             = "projectRepo"
	FieldGitAuthSecret           = "gitAuthSecret"
	FieldGitAuthAccessToken      = "gitAuth.accessToken"
	FieldGitAuthSSHPrivateKey    = "gitAuth.sshAuth.sshPrivateKey"
	FieldGitAuthSSHPassword      = "gitAuth.sshAuth.password"
	FieldGitAuthKnownHosts       = "gitAuth.sshAuth.knownHosts"
	FieldGitAuthUserName         = "gitAuth.basicAuth.userName"
	FieldGitAuthPassword         = "gitAuth.basicAuth.password"
	FieldGitHubAppID             = "gitAuth.githubApp.appID"
	FieldGitHubAppInstallationID = "gitAuth.githubApp.installationID"
	FieldGitHubAppPrivateKey     = "gitAuth.githubApp.privateKey"
	FieldFluxSource              = "fluxSource.sourceRef"
	FieldProgramRef              = "programRef"
	FieldPrerequisites           = "prerequisites"
)

const gitAuthPrefix = "gitAuth."

// listFields are the fields whose Entry is a list index (the others' is a
// map key).
var listFields = map[string]bool{FieldEnvs: true, FieldEnvSecrets: true, FieldPrerequisites: true}

// Path names the reference as a user finds it in the spec:
// "gitAuth.sshAuth.knownHosts", "secretsRef.db", "envs[0]".
func (r Ref) Path() string {
	switch {
	case r.Entry == "":
		return r.Field
	case listFields[r.Field]:
		return r.Field + "[" + r.Entry + "]"
	}
	return r.Field + "." + r.Entry
}

// Refs is every reference of the Stack's spec, in a stable order: the one
// walk of them, from which admission errors (CrossNamespaceRefs), the
// credential mapping (GitAuth), the inputs read and digested, the Secrets
// polled and the controller's indexes and watches all derive, so they cannot
// disagree about which references exist or where they point.
//
// workspaceTemplate and updateTemplate are not walked: the references in
// them (env valueFrom, volumes) are Kubernetes' own, resolved by the kubelet
// in the Stack's namespace; the operator reads none of them.
func Refs(s *pulumiv1.Stack) []Ref {
	spec := &s.Spec
	var refs []Ref
	resource := func(field, entry string, r *pulumiv1.ResourceRef) {
		if r == nil {
			return
		}
		ref := Ref{Field: field, Entry: entry, Kind: string(r.SelectorType)}
		if r.SelectorType == pulumiv1.ResourceSelectorSecret && r.SecretRef != nil {
			ref.Name, ref.Namespace, ref.Key = r.SecretRef.Name, r.SecretRef.Namespace, r.SecretRef.Key
		}
		refs = append(refs, ref)
	}
	if spec.AccessTokenSecret != "" {
		refs = append(refs, Ref{Field: FieldAccessTokenSecret, Kind: KindSecret, Name: spec.AccessTokenSecret, Key: AccessTokenKey})
	}
	for i, name := range spec.Envs {
		refs = append(refs, Ref{Field: FieldEnvs, Entry: strconv.Itoa(i), Kind: KindConfigMap, Name: name})
	}
	for _, k := range slices.Sorted(maps.Keys(spec.EnvRefs)) {
		r := spec.EnvRefs[k]
		resource(FieldEnvRefs, k, &r)
	}
	for i, name := range spec.SecretEnvs {
		refs = append(refs, Ref{Field: FieldEnvSecrets, Entry: strconv.Itoa(i), Kind: KindSecret, Name: name})
	}
	for _, k := range slices.Sorted(maps.Keys(spec.ConfigRef)) {
		r := spec.ConfigRef[k]
		refs = append(refs, Ref{Field: FieldConfigRef, Entry: k, Kind: KindConfigMap, Name: r.Name, Key: r.Key})
	}
	for _, k := range slices.Sorted(maps.Keys(spec.SecretRefs)) {
		r := spec.SecretRefs[k]
		resource(FieldSecretsRef, k, &r)
	}
	// gitAuth and gitAuthSecret are inline fields of the git source: they
	// exist only with it.
	if g := spec.GitSource; g != nil {
		if g.ProjectRepo != "" {
			refs = append(refs, Ref{Field: FieldProjectRepo, Kind: KindGit, Name: g.ProjectRepo, Key: g.Branch})
		}
		if g.GitAuthSecret != "" {
			refs = append(refs, Ref{Field: FieldGitAuthSecret, Kind: KindSecret, Name: g.GitAuthSecret})
		}
		if ga := g.GitAuth; ga != nil {
			resource(FieldGitAuthAccessToken, "", ga.PersonalAccessToken)
			if k := ga.SSHAuth; k != nil {
				resource(FieldGitAuthSSHPrivateKey, "", &k.SSHPrivateKey)
				resource(FieldGitAuthSSHPassword, "", k.Password)
				resource(FieldGitAuthKnownHosts, "", k.KnownHosts)
			}
			if b := ga.BasicAuth; b != nil {
				resource(FieldGitAuthUserName, "", &b.UserName)
				resource(FieldGitAuthPassword, "", &b.Password)
			}
			if app := ga.GitHubApp; app != nil {
				resource(FieldGitHubAppID, "", &app.AppID)
				resource(FieldGitHubAppInstallationID, "", &app.InstallationID)
				resource(FieldGitHubAppPrivateKey, "", &app.PrivateKey)
			}
		}
	}
	if fs := spec.FluxSource; fs != nil {
		refs = append(refs, Ref{Field: FieldFluxSource, Kind: fs.SourceRef.Kind, Name: fs.SourceRef.Name})
	}
	if p := spec.ProgramRef; p != nil {
		refs = append(refs, Ref{Field: FieldProgramRef, Kind: KindProgram, Name: p.Name})
	}
	for i, p := range spec.Prerequisites {
		refs = append(refs, Ref{Field: FieldPrerequisites, Entry: strconv.Itoa(i), Kind: KindStack, Name: p.Name})
	}
	return refs
}

// AccessTokenKey is the key of the deprecated accessTokenSecret's Secret
// holding the Pulumi access token.
const AccessTokenKey = "accessToken"

// Names lists the names of the objects of kind among refs, each once, in
// order.
func Names(refs []Ref, kind string) []string {
	var names []string
	seen := map[string]bool{}
	for _, r := range refs {
		if r.Kind == kind && r.Name != "" && !seen[r.Name] {
			seen[r.Name] = true
			names = append(names, r.Name)
		}
	}
	return names
}

// foreign: r names a namespace other than the Stack's.
func foreign(s *pulumiv1.Stack, r Ref) bool {
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
	for _, r := range Refs(s) {
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
	for _, r := range Refs(s) {
		slot := gitAuthSlot(out, r.Field)
		if slot == nil {
			continue
		}
		what := strings.TrimPrefix(r.Field, gitAuthPrefix)
		switch {
		case r.Kind != KindSecret || r.Name == "":
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
	case FieldGitAuthAccessToken:
		return &a.Token
	case FieldGitAuthUserName:
		return &a.Username
	case FieldGitAuthPassword, FieldGitAuthSSHPassword:
		return &a.Password
	case FieldGitAuthSSHPrivateKey:
		return &a.SSHPrivateKey
	case FieldGitAuthKnownHosts:
		return &a.KnownHosts
	}
	if a.GitHubApp == nil {
		return nil
	}
	switch field {
	case FieldGitHubAppID:
		return &a.GitHubApp.AppID
	case FieldGitHubAppInstallationID:
		return &a.GitHubApp.InstallationID
	case FieldGitHubAppPrivateKey:
		return &a.GitHubApp.PrivateKey
	}
	return nil
}
