package stack

import (
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// refFields is every field of a StackSpec that refers to something outside
// the Stack, with what Refs must say of it. TestRefsWalkEveryReferenceField
// finds the reference fields of the API type by reflection and fails when
// one is missing here (a new field Refs does not walk).
var refFields = []struct {
	path, kind string
	// keyed: the reference names a key of its object.
	keyed bool
}{
	{FieldAccessTokenSecret, KindSecret, true},
	{"envs[0]", KindConfigMap, false},
	{"envRefs.e", KindSecret, true},
	{"envSecrets[0]", KindSecret, false},
	{"configRef.e", KindConfigMap, true},
	{"secretsRef.e", KindSecret, true},
	{FieldProjectRepo, KindGit, false},
	{FieldGitAuthSecret, KindSecret, false},
	{FieldGitAuthAccessToken, KindSecret, true},
	{FieldGitAuthSSHPrivateKey, KindSecret, true},
	{FieldGitAuthSSHPassword, KindSecret, true},
	{FieldGitAuthKnownHosts, KindSecret, true},
	{FieldGitAuthUserName, KindSecret, true},
	{FieldGitAuthPassword, KindSecret, true},
	{FieldGitHubAppID, KindSecret, true},
	{FieldGitHubAppInstallationID, KindSecret, true},
	{FieldGitHubAppPrivateKey, KindSecret, true},
	{FieldFluxSource, "GitRepository", false},
	{FieldProgramRef, KindProgram, false},
	{"prerequisites[0]", KindStack, false},
}

// notReferences are StackSpec fields that look like references (by name)
// but that the operator does not resolve, and why. Adding a field here is a
// decision, not a way to make the test pass.
var notReferences = map[string]string{
	"serviceAccountName": "the workspace pod's ServiceAccount, resolved by Kubernetes in the Stack's namespace; the operator reads nothing of it",
	"workspaceTemplate":  "Kubernetes' own references (env valueFrom, volumes), resolved by the kubelet in the Stack's namespace",
	"updateTemplate":     "Update fields; none refers to an object",
}

// refTypes are the API types whose values are references.
var refTypes = map[reflect.Type]bool{
	reflect.TypeOf(pulumiv1.ResourceRef{}):         true,
	reflect.TypeOf(pulumiv1.ConfigMapRef{}):        true,
	reflect.TypeOf(pulumiv1.PrerequisiteRef{}):     true,
	reflect.TypeOf(pulumiv1.ProgramReference{}):    true,
	reflect.TypeOf(pulumiv1.FluxSourceReference{}): true,
	reflect.TypeOf(pulumiv1.SecretSelector{}):      true,
}

// nameFields are the string fields naming an object or repository.
var nameFields = map[string]bool{FieldAccessTokenSecret: true, FieldEnvs: true, FieldEnvSecrets: true, FieldGitAuthSecret: true, FieldProjectRepo: true}

// looksLikeReference: a field whose JSON name suggests it names something.
func looksLikeReference(name string) bool {
	for _, suffix := range []string{"Secret", "Secrets", "Ref", "Refs", "Repo", "ConfigMap", "ConfigMaps", "Name", "Names", "Source", "Template"} {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return false
}

// fill sets every reference field under v (of the type at path) to a
// reference naming its own path, and returns the paths filled with the name
// each got. It fails on a field that looks like a reference but is neither a
// reference type nor a known name field.
func fill(t *testing.T, v reflect.Value, path string, filled map[string]string) {
	t.Helper()
	typ := v.Type()
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		p := name
		if path != "" && name != "" {
			p = path + "." + name
		} else if name == "" {
			p = path // inline
		}
		fv := v.Field(i)
		ft := f.Type
		if _, skip := notReferences[p]; skip {
			continue
		}
		switch {
		case refTypes[ft]:
			filled[p] = setRef(fv, p)
		case ft.Kind() == reflect.Pointer && refTypes[ft.Elem()]:
			fv.Set(reflect.New(ft.Elem()))
			filled[p] = setRef(fv.Elem(), p)
		case ft.Kind() == reflect.Map && refTypes[ft.Elem()]:
			m := reflect.MakeMap(ft)
			e := reflect.New(ft.Elem()).Elem()
			filled[p+".e"] = setRef(e, p+".e")
			m.SetMapIndex(reflect.ValueOf("e"), e)
			fv.Set(m)
		case ft.Kind() == reflect.Slice && refTypes[ft.Elem()]:
			s := reflect.MakeSlice(ft, 1, 1)
			filled[p+"[0]"] = setRef(s.Index(0), p+"[0]")
			fv.Set(s)
		case nameFields[p] && ft.Kind() == reflect.String:
			fv.SetString("name-of-" + p)
			filled[p] = "name-of-" + p
		case nameFields[p] && ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.String:
			fv.Set(reflect.ValueOf([]string{"name-of-" + p}))
			filled[p+"[0]"] = "name-of-" + p
		case ft.Kind() == reflect.Struct && ft.PkgPath() == typ.PkgPath():
			fill(t, fv, p, filled)
		case ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct && ft.Elem().PkgPath() == typ.PkgPath():
			fv.Set(reflect.New(ft.Elem()))
			fill(t, fv.Elem(), p, filled)
		case looksLikeReference(name):
			t.Errorf("spec.%s (%s) looks like a reference: walk it in Refs and list it in refFields, or say in notReferences why it is none", p, ft)
		}
	}
}

func setRef(v reflect.Value, path string) string {
	name := "name-of-" + path
	switch r := v.Addr().Interface().(type) {
	case *pulumiv1.ResourceRef:
		r.SelectorType = pulumiv1.ResourceSelectorSecret
		r.SecretRef = &pulumiv1.SecretSelector{Name: name, Key: "key-of-" + path}
	case *pulumiv1.ConfigMapRef:
		r.Name, r.Key = name, "key-of-"+path
	case *pulumiv1.PrerequisiteRef:
		r.Name = name
	case *pulumiv1.ProgramReference:
		r.Name = name
	case *pulumiv1.FluxSourceReference:
		r.APIVersion, r.Kind, r.Name = "source.toolkit.fluxcd.io/v1", "GitRepository", name
	case *pulumiv1.SecretSelector:
		r.Name, r.Key = name, "key-of-"+path
	}
	return name
}

// TestRefsWalkEveryReferenceField: Refs yields one Ref for each reference
// field of the Stack type, as refFields says, and nothing else; a field
// added to the API that refers to something fails here until Refs walks it.
func TestRefsWalkEveryReferenceField(t *testing.T) {
	s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web"}}
	filled := map[string]string{}
	fill(t, reflect.ValueOf(&s.Spec).Elem(), "", filled)

	var found, listed []string
	for p := range filled {
		found = append(found, p)
	}
	for _, f := range refFields {
		listed = append(listed, f.path)
	}
	sort.Strings(found)
	sort.Strings(listed)
	if !reflect.DeepEqual(found, listed) {
		t.Fatalf("reference fields of the API type:\n  %v\nlisted in refFields:\n  %v", found, listed)
	}

	refs := Refs(s)
	byPath := map[string]Ref{}
	for _, r := range refs {
		if _, dup := byPath[r.Path()]; dup {
			t.Errorf("two references at %s", r.Path())
		}
		byPath[r.Path()] = r
	}
	for _, f := range refFields {
		r, ok := byPath[f.path]
		if !ok {
			t.Errorf("Refs does not walk %s", f.path)
			continue
		}
		wantKey := ""
		if f.keyed {
			wantKey = "key-of-" + f.path
		}
		if f.path == FieldAccessTokenSecret {
			wantKey = AccessTokenKey // the deprecated field names a Secret; its key is fixed
		}
		if r.Kind != f.kind || r.Name != filled[f.path] || r.Key != wantKey || r.Namespace != "" {
			t.Errorf("%s: %+v, want kind %s, name %s, key %q", f.path, r, f.kind, filled[f.path], wantKey)
		}
		delete(byPath, f.path)
	}
	for p, r := range byPath {
		t.Errorf("Refs yields %s (%+v), which is no reference field", p, r)
	}
}

// TestRefsOfOtherTypes: a ResourceRef whose value is not in an object is a
// Ref of its type naming nothing; git credentials exist only with a git
// source; a branch is the Git Ref's key.
func TestRefsOfOtherTypes(t *testing.T) {
	s := &pulumiv1.Stack{Spec: pulumiv1.StackSpec{
		EnvRefs: map[string]pulumiv1.ResourceRef{
			"LIT": {SelectorType: pulumiv1.ResourceSelectorLiteral, ResourceSelector: pulumiv1.ResourceSelector{LiteralRef: &pulumiv1.LiteralRef{Value: "v"}}},
			"ENV": {SelectorType: pulumiv1.ResourceSelectorEnv, ResourceSelector: pulumiv1.ResourceSelector{Env: &pulumiv1.EnvSelector{Name: "HOME"}}},
		},
		SecretRefs: map[string]pulumiv1.ResourceRef{"f": {SelectorType: pulumiv1.ResourceSelectorFS, ResourceSelector: pulumiv1.ResourceSelector{FileSystem: &pulumiv1.FSSelector{Path: "/x"}}}},
		GitSource:  &pulumiv1.GitSource{ProjectRepo: "https://example.com/r.git", Branch: "main"},
	}}
	want := []Ref{
		{Field: FieldEnvRefs, Entry: "ENV", Kind: "Env"},
		{Field: FieldEnvRefs, Entry: "LIT", Kind: "Literal"},
		{Field: FieldSecretsRef, Entry: "f", Kind: "FS"},
		{Field: FieldProjectRepo, Kind: KindGit, Name: "https://example.com/r.git", Key: "main"},
	}
	if got := Refs(s); !reflect.DeepEqual(got, want) {
		t.Fatalf("Refs = %+v\nwant %+v", got, want)
	}
	if names := Names(Refs(s), KindSecret); len(names) != 0 {
		t.Fatalf("Secrets named: %v", names)
	}
}

func nsSecretRef(ns, name string) pulumiv1.ResourceRef {
	return pulumiv1.ResourceRef{SelectorType: pulumiv1.ResourceSelectorSecret,
		ResourceSelector: pulumiv1.ResourceSelector{SecretRef: &pulumiv1.SecretSelector{Namespace: ns, Name: name, Key: "k"}}}
}

func TestCrossNamespaceRefs(t *testing.T) {
	cases := []struct {
		name string
		spec func(*pulumiv1.StackSpec)
		want []string // substrings of the error; none: accepted
	}{
		{name: "no references", spec: func(*pulumiv1.StackSpec) {}},
		{name: "own namespace spelled out", spec: func(s *pulumiv1.StackSpec) {
			s.SecretRefs = map[string]pulumiv1.ResourceRef{"db": nsSecretRef("team-a", "db")}
		}},
		{name: "namespace left empty", spec: func(s *pulumiv1.StackSpec) {
			s.EnvRefs = map[string]pulumiv1.ResourceRef{"TOKEN": nsSecretRef("", "tok")}
		}},
		{name: "secretsRef and envRefs elsewhere", spec: func(s *pulumiv1.StackSpec) {
			s.SecretRefs = map[string]pulumiv1.ResourceRef{"db": nsSecretRef("team-b", "db")}
			s.EnvRefs = map[string]pulumiv1.ResourceRef{"TOKEN": nsSecretRef("kube-system", "tok")}
		}, want: []string{"namespace team-a", "envRefs.TOKEN (namespace kube-system)", "secretsRef.db (namespace team-b)", "remove their namespace field"}},
		{name: "git credentials elsewhere", spec: func(s *pulumiv1.StackSpec) {
			pw := nsSecretRef("team-b", "git")
			s.GitSource = &pulumiv1.GitSource{ProjectRepo: "https://example.com/acme/app.git"}
			s.GitAuth = &pulumiv1.GitAuthConfig{
				BasicAuth: &pulumiv1.BasicAuth{UserName: nsSecretRef("", "git"), Password: nsSecretRef("team-b", "git")},
				SSHAuth:   &pulumiv1.SSHAuth{SSHPrivateKey: nsSecretRef("team-a", "key"), Password: &pw},
			}
		}, want: []string{"gitAuth.basicAuth.password (namespace team-b)", "gitAuth.sshAuth.password (namespace team-b)"}},
		// The walkers used to disagree: admission skipped knownHosts while
		// the credential mapping dropped its namespace, so the same-named
		// Secret of the Stack's namespace was read silently.
		{name: "known_hosts elsewhere", spec: func(s *pulumiv1.StackSpec) {
			kh := nsSecretRef("kube-system", "known-hosts")
			s.GitSource = &pulumiv1.GitSource{ProjectRepo: "ssh://git@example.com/app.git"}
			s.GitAuth = &pulumiv1.GitAuthConfig{SSHAuth: &pulumiv1.SSHAuth{SSHPrivateKey: nsSecretRef("", "key"), KnownHosts: &kh}}
		}, want: []string{"gitAuth.sshAuth.knownHosts (namespace kube-system)"}},
		{name: "GitHub App key elsewhere", spec: func(s *pulumiv1.StackSpec) {
			s.GitSource = &pulumiv1.GitSource{ProjectRepo: "https://example.com/app.git"}
			s.GitAuth = &pulumiv1.GitAuthConfig{GitHubApp: &pulumiv1.GitHubAppAuth{AppID: nsSecretRef("", "app"), InstallationID: nsSecretRef("", "app"), PrivateKey: nsSecretRef("platform", "app")}}
		}, want: []string{"gitAuth.githubApp.privateKey (namespace platform)"}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web"}}
			tt.spec(&s.Spec)
			err := CrossNamespaceRefs(s)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var spec *SpecError
			if !errors.As(err, &spec) {
				t.Fatalf("err = %v, want a SpecError", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "userName") || strings.Contains(err.Error(), "sshPrivateKey") {
				t.Errorf("%q names a reference in the Stack's own namespace", err)
			}
		})
	}
}

func sel(name, key string) *corev1.SecretKeySelector {
	return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

// TestGitAuth: spec.gitAuth maps to the Workspace's Secret references from
// the one walk; a reference it cannot map, one to another namespace, and a
// refused apiURL are spec errors naming the field.
func TestGitAuth(t *testing.T) {
	ref := func(name, key string) pulumiv1.ResourceRef { return secretRef(name, key) }
	refp := func(name, key string) *pulumiv1.ResourceRef { r := secretRef(name, key); return &r }
	stackWith := func(ga *pulumiv1.GitAuthConfig) *pulumiv1.Stack {
		return &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a"}, Spec: pulumiv1.StackSpec{GitSource: &pulumiv1.GitSource{ProjectRepo: "https://x", GitAuth: ga}}}
	}
	kh := nsSecretRef("kube-system", "known-hosts")
	own := nsSecretRef("team-a", "known-hosts")
	for _, tc := range []struct {
		name  string
		s     *pulumiv1.Stack
		hosts []string
		want  *autov1alpha1.GitAuth
		err   string
	}{
		{name: "no git source", s: &pulumiv1.Stack{}},
		{name: "no gitAuth", s: stackWith(nil)},
		{name: "token", s: stackWith(&pulumiv1.GitAuthConfig{PersonalAccessToken: refp("s", "t")}), want: &autov1alpha1.GitAuth{Token: sel("s", "t")}},
		{name: "basic", s: stackWith(&pulumiv1.GitAuthConfig{BasicAuth: &pulumiv1.BasicAuth{UserName: ref("s", "u"), Password: ref("s", "p")}}),
			want: &autov1alpha1.GitAuth{Username: sel("s", "u"), Password: sel("s", "p")}},
		{name: "ssh", s: stackWith(&pulumiv1.GitAuthConfig{SSHAuth: &pulumiv1.SSHAuth{SSHPrivateKey: ref("s", "k"), Password: refp("s", "p"), KnownHosts: refp("h", "known_hosts")}}),
			want: &autov1alpha1.GitAuth{SSHPrivateKey: sel("s", "k"), Password: sel("s", "p"), KnownHosts: sel("h", "known_hosts")}},
		{name: "known_hosts in the Stack's namespace, spelled out", s: stackWith(&pulumiv1.GitAuthConfig{SSHAuth: &pulumiv1.SSHAuth{SSHPrivateKey: ref("s", "k"), KnownHosts: &own}}),
			want: &autov1alpha1.GitAuth{SSHPrivateKey: sel("s", "k"), KnownHosts: sel("known-hosts", "k")}},
		{name: "known_hosts in another namespace", s: stackWith(&pulumiv1.GitAuthConfig{SSHAuth: &pulumiv1.SSHAuth{SSHPrivateKey: ref("s", "k"), KnownHosts: &kh}}),
			err: "gitAuth sshAuth.knownHosts: the Secret must be in the Stack's namespace team-a, not kube-system; remove its namespace field"},
		{name: "github app", s: stackWith(&pulumiv1.GitAuthConfig{GitHubApp: &pulumiv1.GitHubAppAuth{AppID: ref("a", "id"), InstallationID: ref("a", "i"), PrivateKey: ref("a", "k"), APIURL: "https://ghe/api/v3"}}),
			want: &autov1alpha1.GitAuth{GitHubApp: &autov1alpha1.GitHubAppAuth{AppID: sel("a", "id"), InstallationID: sel("a", "i"), PrivateKey: sel("a", "k"), APIURL: "https://ghe/api/v3"}}},
		{name: "github app, apiURL with a query", s: stackWith(&pulumiv1.GitAuthConfig{GitHubApp: &pulumiv1.GitHubAppAuth{AppID: ref("a", "id"), InstallationID: ref("a", "i"), PrivateKey: ref("a", "k"), APIURL: "https://internal/admin?"}}),
			err: "githubApp.apiURL must be https://"},
		{name: "github app, apiURL host not allowed", hosts: []string{"ghe.example.com"},
			s:   stackWith(&pulumiv1.GitAuthConfig{GitHubApp: &pulumiv1.GitHubAppAuth{AppID: ref("a", "id"), InstallationID: ref("a", "i"), PrivateKey: ref("a", "k"), APIURL: "https://ghe.internal/api/v3"}}),
			err: "host ghe.internal is not one the operator may reach for GitHub Apps (--github-api-hosts: ghe.example.com)"},
		{name: "not a secret", s: stackWith(&pulumiv1.GitAuthConfig{SSHAuth: &pulumiv1.SSHAuth{SSHPrivateKey: ref("s", "k"), KnownHosts: &pulumiv1.ResourceRef{SelectorType: pulumiv1.ResourceSelectorLiteral}}}),
			err: "gitAuth sshAuth.knownHosts: only type Secret is supported, got Literal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := GitAuth(tc.s, tc.hosts)
			if tc.err != "" {
				var se *SpecError
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.As(err, &se) {
					t.Fatalf("err = %v, want a SpecError saying %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("GitAuth = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
