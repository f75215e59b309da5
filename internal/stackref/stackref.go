// Package stackref holds the one walk of a Stack's references: every field
// of its spec that names something outside it (a Secret or ConfigMap key, a
// Program, a Flux source, a prerequisite Stack, the git repository of its
// program). The operator derives from it its admission errors, credential
// mapping, inputs digest, watches and indexes; the GitHub Action what a
// preview can resolve from a pull request's manifests. A test fails when the
// Stack type gains a reference field the walk does not know.
package stackref

import (
	"maps"
	"slices"
	"strconv"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
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

// GitAuthPrefix begins the Field of every reference within gitAuth.
const GitAuthPrefix = "gitAuth."

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
// walk of them, from which admission errors (stack.CrossNamespaceRefs), the
// credential mapping (stack.GitAuth), the inputs read and digested, the Secrets
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
