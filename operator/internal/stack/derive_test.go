package stack

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

func baseStack() *pulumiv1.Stack {
	return &pulumiv1.Stack{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", Generation: 2, UID: "uid-1"},
		Spec:       pulumiv1.StackSpec{Stack: "org/app/dev", GitSource: &pulumiv1.GitSource{ProjectRepo: "https://example.com/r", Branch: "main", RepoDir: "infra"}},
	}
}

func secretRef(name, key string) pulumiv1.ResourceRef {
	return pulumiv1.ResourceRef{SelectorType: pulumiv1.ResourceSelectorSecret, ResourceSelector: pulumiv1.ResourceSelector{SecretRef: &pulumiv1.SecretSelector{Name: name, Key: key}}}
}

func gitInputs() Inputs {
	return Inputs{Source: Source{GitURL: "https://example.com/r", Commit: strings.Repeat("a", 40), Dir: "infra", Revision: strings.Repeat("a", 40)}}
}

func TestWorkspaceDerivation(t *testing.T) {
	s := baseStack()
	yes := true
	s.Spec.Config = map[string]apiextensionsv1.JSON{"app:obj": {Raw: []byte(`{ "b": 1,  "a": [true] }`)}}
	s.Spec.ConfigRef = map[string]pulumiv1.ConfigMapRef{"app:fromCM": {Name: "cm", Key: "k", JSON: &yes}, "app:plain": {Name: "cm", Key: "p"}}
	s.Spec.SecretRefs = map[string]pulumiv1.ResourceRef{"app:db.password": secretRef("db", "pw"),
		"app:lit": {SelectorType: pulumiv1.ResourceSelectorLiteral, ResourceSelector: pulumiv1.ResourceSelector{LiteralRef: &pulumiv1.LiteralRef{Value: "x"}}}}
	s.Spec.EnvRefs = map[string]pulumiv1.ResourceRef{"PULUMI_ACCESS_TOKEN": secretRef("tok", "t")}
	s.Spec.Backend = "s3://state"
	s.Spec.Envs, s.Spec.SecretEnvs = []string{"env-cm"}, []string{"env-secret"}
	s.Spec.Secrets = map[string]string{"app:legacy": "v"}
	s.Spec.SecretsProvider = "passphrase"
	s.Spec.UseLocalStackOnly = true
	s.Spec.ServiceAccountName = "pulumi"
	s.Spec.WorkspaceTemplate = &pulumiv1.WorkspaceTemplate{
		Metadata: autov1alpha1.EmbeddedObjectMeta{Labels: map[string]string{"team": "platform"}},
		Spec:     &autov1alpha1.WorkspaceSpec{Image: "custom:1", Env: []corev1.EnvVar{{Name: "EXTRA", Value: "1"}, {Name: "PULUMI_BACKEND_URL", Value: "file:///override"}}},
	}
	in := gitInputs()
	in.ConfigMapValues = map[string]string{"app:fromCM": `{"z": 1, "a": 2}`, "app:plain": "text"}
	ws, err := Workspace(s, in)
	if err != nil {
		t.Fatal(err)
	}
	if ws.Name != "app" || ws.Labels[StackNameLabel] != "app" || ws.Labels["team"] != "platform" {
		t.Fatalf("metadata = %+v", ws.ObjectMeta)
	}
	if ws.Spec.Git == nil || ws.Spec.Git.Ref != strings.Repeat("a", 40) || ws.Spec.Git.Dir != "infra" || ws.Spec.Image != "custom:1" || ws.Spec.ServiceAccountName != "pulumi" {
		t.Fatalf("spec = %+v", ws.Spec)
	}
	st := ws.Spec.Stacks[0]
	if st.Name != "org/app/dev" || *st.Create || *st.SecretsProvider != "passphrase" {
		t.Fatalf("stack = %+v", st)
	}
	items := map[string]autov1alpha1.ConfigItem{}
	for _, c := range st.Config {
		items[c.Key] = c
	}
	checkValue := func(key, want string) {
		t.Helper()
		if got := string(items[key].Value.Raw); got != want {
			t.Errorf("config %s = %s, want %s", key, got, want)
		}
	}
	checkValue("app:obj", `{"a":[true],"b":1}`)
	checkValue("app:fromCM", `{"a":2,"z":1}`)
	checkValue("app:plain", `"text"`)
	checkValue("app:lit", `"x"`)
	checkValue("app:legacy", `"v"`)
	pw := items["app:db.password"]
	if pw.Value != nil || pw.ValueFrom == nil || pw.ValueFrom.Env != "STACKFLOW_SECRET_APP_DB_PASSWORD" || !*pw.Secret {
		t.Fatalf("secretsRef item = %+v", pw)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range ws.Spec.Env {
		if _, dup := env[e.Name]; dup {
			t.Fatalf("env %s twice", e.Name)
		}
		env[e.Name] = e
	}
	if ref := env["STACKFLOW_SECRET_APP_DB_PASSWORD"].ValueFrom; ref == nil || ref.SecretKeyRef.Name != "db" || ref.SecretKeyRef.Key != "pw" {
		t.Fatalf("secret env = %+v", env["STACKFLOW_SECRET_APP_DB_PASSWORD"])
	}
	if ref := env["PULUMI_ACCESS_TOKEN"].ValueFrom; ref == nil || ref.SecretKeyRef.Name != "tok" {
		t.Fatalf("envRefs secret = %+v", env["PULUMI_ACCESS_TOKEN"])
	}
	if env["PULUMI_BACKEND_URL"].Value != "file:///override" || env["EXTRA"].Value != "1" {
		t.Fatalf("template env not merged over ours: %+v", ws.Spec.Env)
	}
	if len(ws.Spec.EnvFrom) != 2 || ws.Spec.EnvFrom[0].ConfigMapRef.Name != "env-cm" || ws.Spec.EnvFrom[1].SecretRef.Name != "env-secret" {
		t.Fatalf("envFrom = %+v", ws.Spec.EnvFrom)
	}
	b, _ := json.Marshal(ws)
	if strings.Contains(string(b), `"pw"`) && strings.Contains(string(b), "hunter") {
		t.Fatal("a secret value entered the Workspace")
	}
	again, _ := Workspace(s, in)
	a1, _ := json.Marshal(ws)
	a2, _ := json.Marshal(again)
	if string(a1) != string(a2) {
		t.Fatal("derivation is not deterministic")
	}
}

func TestWorkspaceDerivationErrors(t *testing.T) {
	no := false
	cases := []struct {
		name   string
		mutate func(*pulumiv1.Stack, *Inputs)
		want   string
	}{
		{"no source", func(s *pulumiv1.Stack, in *Inputs) { s.Spec.GitSource = nil; *in = Inputs{} }, "no program source"},
		{"bad configRef JSON", func(s *pulumiv1.Stack, in *Inputs) {
			yes := true
			s.Spec.ConfigRef = map[string]pulumiv1.ConfigMapRef{"k": {Name: "cm", Key: "v", JSON: &yes}}
			in.ConfigMapValues = map[string]string{"k": "{nope"}
		}, "configmap cm key v is not valid JSON"},
		{"FS envRef", func(s *pulumiv1.Stack, _ *Inputs) {
			s.Spec.EnvRefs = map[string]pulumiv1.ResourceRef{"X": {SelectorType: pulumiv1.ResourceSelectorFS, ResourceSelector: pulumiv1.ResourceSelector{FileSystem: &pulumiv1.FSSelector{Path: "/f"}}}}
		}, "envRefs X: type FS is not supported"},
		{"template cannot drop the source", func(s *pulumiv1.Stack, in *Inputs) {
			s.Spec.WorkspaceTemplate = &pulumiv1.WorkspaceTemplate{Spec: &autov1alpha1.WorkspaceSpec{Stacks: []autov1alpha1.WorkspaceStack{{Name: "org/app/dev", Create: &no}}}}
			s.Spec.GitSource = nil
			*in = Inputs{}
		}, "no program source"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := baseStack()
			in := gitInputs()
			tc.mutate(s, &in)
			_, err := Workspace(s, in)
			var se *SpecError
			if err == nil || !strings.Contains(err.Error(), tc.want) || !asSpecError(err, &se) {
				t.Fatalf("err = %v, want a SpecError containing %q", err, tc.want)
			}
		})
	}
}

func TestGitAuthDerivation(t *testing.T) {
	s := baseStack()
	tok := secretRef("git", "token")
	s.Spec.GitAuth = &pulumiv1.GitAuthConfig{PersonalAccessToken: &tok}
	ga, err := GitAuth(s, nil)
	if err != nil || ga.Token == nil || ga.Token.Name != "git" || ga.Token.Key != "token" {
		t.Fatalf("GitAuth = %+v, %v", ga, err)
	}
	lit := pulumiv1.ResourceRef{SelectorType: pulumiv1.ResourceSelectorLiteral, ResourceSelector: pulumiv1.ResourceSelector{LiteralRef: &pulumiv1.LiteralRef{Value: "t"}}}
	s.Spec.GitAuth = &pulumiv1.GitAuthConfig{PersonalAccessToken: &lit}
	var se *SpecError
	if _, err := GitAuth(s, nil); err == nil || !asSpecError(err, &se) || !strings.Contains(err.Error(), "gitAuth accessToken: only type Secret is supported") {
		t.Fatalf("literal token: %v", err)
	}
}

func asSpecError(err error, target **SpecError) bool {
	se, ok := err.(*SpecError)
	*target = se
	return ok
}

func TestUpdateDerivation(t *testing.T) {
	s := baseStack()
	s.Generation = 7
	s.Annotations = map[string]string{pulumiv1.ReconcileRequestAnnotation: "req-1"}
	s.Spec.Targets = []string{"urn:a"}
	s.Spec.TargetDependents = true
	s.Spec.Refresh = true
	ttl := metav1.Duration{Duration: 3600e9}
	parallel := int32(3)
	off := false
	s.Spec.UpdateTemplate = &pulumiv1.UpdateTemplate{Spec: &autov1alpha1.UpdateSpec{TtlAfterCompleted: &ttl, Parallel: &parallel, Type: "destroy", WorkspaceName: "other", Refresh: &off}}
	rev := strings.Repeat("a", 40)
	u, err := Update(s, Plan{Number: 12, Type: autov1alpha1.UpType, Purpose: pulumiv1.UpdatePurposeDeploy, Revision: rev, InputsDigest: "hmac-sha256:abc", Message: "Stackflow: new revision"})
	if err != nil {
		t.Fatal(err)
	}
	if u.Spec.Type != "up" || u.Spec.WorkspaceName != "app" || u.Spec.StackName != "org/app/dev" {
		t.Fatalf("the template retargeted the update: %+v", u.Spec)
	}
	if *u.Spec.Parallel != 3 || u.Spec.TtlAfterCompleted.Duration != ttl.Duration || *u.Spec.Refresh || !*u.Spec.TargetDependents || u.Spec.Target[0] != "urn:a" {
		t.Fatalf("update spec = %+v", u.Spec)
	}
	if u.Name != "app-12" || u.Name != UpdateName(s, 12) {
		t.Fatalf("name = %s", u.Name)
	}
	if len(u.Finalizers) != 1 || u.Finalizers[0] != ResultFinalizer {
		t.Fatalf("finalizers = %v: the result finalizer keeps an Update until its Stack recorded it", u.Finalizers)
	}
	// The facts the Update was decided on are read back from it.
	cu := Current(u)
	want := pulumiv1.CurrentStackUpdate{Name: "app-12", Number: 12, Purpose: pulumiv1.UpdatePurposeDeploy, Generation: 7, Commit: rev, ReconcileRequest: "req-1", InputsDigest: "hmac-sha256:abc"}
	if cu != want {
		t.Fatalf("Current = %+v, want %+v", cu, want)
	}
	d, _ := Update(s, Plan{Number: 13, Type: autov1alpha1.DestroyType, Purpose: pulumiv1.UpdatePurposeDestroy, Revision: rev})
	if len(d.Spec.Target) != 0 {
		t.Fatal("a destroy on finalize must not be limited to targets")
	}
	// A drift check and a remediation refresh whatever the template says;
	// a drift check never widens to dependents.
	dc, _ := Update(s, Plan{Number: 14, Type: autov1alpha1.PreviewType, Purpose: pulumiv1.UpdatePurposeDriftCheck, Refresh: true, Revision: rev})
	if dc.Spec.Refresh == nil || !*dc.Spec.Refresh || dc.Spec.TargetDependents != nil {
		t.Fatalf("drift check spec = %+v", dc.Spec)
	}
	s.Spec.Refresh = false
	s.Spec.UpdateTemplate = nil
	plain, _ := Update(s, Plan{Number: 15, Type: autov1alpha1.UpType, Purpose: pulumiv1.UpdatePurposeDeploy, Revision: rev})
	if plain.Spec.Refresh != nil {
		t.Fatal("an up without spec.refresh refreshed: only remediation adds refresh")
	}
}

func TestInputsDigests(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	cm := InputValue{Ref: "configRef/a", Value: []byte("x")}
	sec := InputValue{Ref: "secretsRef p", Value: []byte("hunter2-secret"), AtStart: true}
	all, start := InputsDigests(key, []InputValue{cm, sec})
	if all == "" || start == "" || all == start {
		t.Fatalf("digests %q %q", all, start)
	}
	if a2, s2 := InputsDigests(key, []InputValue{sec, cm}); a2 != all || s2 != start {
		t.Fatal("the digests depend on the order values were read in")
	}
	changed := sec
	changed.Value = []byte("hunter3-secret")
	if a2, s2 := InputsDigests(key, []InputValue{cm, changed}); a2 == all || s2 == start {
		t.Fatal("a changed secret value left the digests unchanged")
	}
	cm2 := cm
	cm2.Value = []byte("y")
	if a2, s2 := InputsDigests(key, []InputValue{cm2, sec}); a2 == all || s2 != start {
		t.Fatal("a configRef change must change the digest but not restart the workspace")
	}
	if a2, _ := InputsDigests([]byte("another-key-another-key-another!"), []InputValue{cm, sec}); a2 == all {
		t.Fatal("the digest does not depend on the key")
	}
	// Length-prefixed: moving bytes between reference and value changes it.
	a, _ := InputsDigests(key, []InputValue{{Ref: "ab", Value: []byte("c")}})
	b, _ := InputsDigests(key, []InputValue{{Ref: "a", Value: []byte("bc")}})
	if a == b {
		t.Fatal("ambiguous encoding")
	}
	if a, s := InputsDigests(key, nil); a != "" || s != "" {
		t.Fatal("no inputs must give no digest")
	}
	if strings.Contains(all+start, "hunter2") {
		t.Fatal("a secret value in a digest")
	}
}

func TestWorkspaceCarriesStartDigest(t *testing.T) {
	s := baseStack()
	ws, err := Workspace(s, Inputs{Source: Source{GitURL: "https://example.com/r.git", Commit: strings.Repeat("a", 40)}, StartDigest: "hmac-sha256:1"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range ws.Spec.Env {
		if e.Name == InputsDigestEnv && e.Value == "hmac-sha256:1" {
			found = true
		}
	}
	if !found {
		t.Fatalf("workspace env %+v lacks %s: a rotated Secret would not restart the workspace", ws.Spec.Env, InputsDigestEnv)
	}
}
