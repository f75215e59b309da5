package stackref

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
