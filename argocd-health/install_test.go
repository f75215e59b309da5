package argocdhealth

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	"github.com/argoproj/gitops-engine/pkg/health"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// TestInstallFilesUpToDate fails when the committed install files differ from
// what the generator writes from the .lua files now.
func TestInstallFilesUpToDate(t *testing.T) {
	files, err := InstallFiles()
	if err != nil {
		t.Fatal(err)
	}
	var stale []string
	for rel, want := range files {
		got, err := os.ReadFile(filepath.Join("install", filepath.FromSlash(rel)))
		if err != nil || string(got) != string(want) {
			stale = append(stale, rel)
		}
	}
	err = filepath.WalkDir("install", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel("install", p)
		if _, ok := files[filepath.ToSlash(rel)]; !ok {
			stale = append(stale, rel+" (not generated)")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		sort.Strings(stale)
		t.Fatalf("install files are stale: %s; run go run ./argocd-health/cmd/gen", strings.Join(stale, ", "))
	}
}

// argoCDConfigMap is argocd-cm as Argo CD's install manifest ships it.
const argoCDConfigMap = `apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-cm
  labels:
    app.kubernetes.io/name: argocd-cm
    app.kubernetes.io/part-of: argocd
data:
  timeout.reconciliation: 180s
`

// TestKustomizeComponent builds, with kustomize's own library, an Argo CD
// kustomization (namespace argocd) using the generated Component, and reads
// the resulting argocd-cm as Argo CD does: it yields the embedded
// customizations and keeps the ConfigMap's other entries.
func TestKustomizeComponent(t *testing.T) {
	files, err := InstallFiles()
	if err != nil {
		t.Fatal(err)
	}
	fs := filesys.MakeFsInMemory()
	for rel, b := range files {
		if err := fs.WriteFile(filepath.Join("/stackflow", rel), b); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(fs.WriteFile("/argocd/argocd-cm.yaml", []byte(argoCDConfigMap)))
	must(fs.WriteFile("/argocd/kustomization.yaml", []byte(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: argocd
resources:
- argocd-cm.yaml
components:
- ../stackflow/kustomize
`)))
	out, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, "/argocd")
	if err != nil {
		t.Fatal(err)
	}
	// argocd-cm, and the RBAC letting argocd-server create PlanApprovals.
	if len(out.Resources()) != 3 {
		t.Fatalf("kustomize built %d resources, want argocd-cm, a ClusterRole and a ClusterRoleBinding", len(out.Resources()))
	}
	checkPlanApprovalRBAC(t, out.Resources()[1].MustYaml()+"---\n"+out.Resources()[2].MustYaml())
	cmRes, err := out.GetById(out.Resources()[0].CurId())
	if err != nil {
		t.Fatal(err)
	}
	b, err := cmRes.AsYAML()
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Metadata struct{ Name, Namespace string }
		Data     map[string]string
	}
	must(yaml.Unmarshal(b, &cm))
	if cm.Metadata.Name != "argocd-cm" || cm.Metadata.Namespace != "argocd" || cm.Data["timeout.reconciliation"] != "180s" {
		t.Fatalf("patched ConfigMap:\n%s", b)
	}
	checkConfigMapData(t, cm.Data)
}

// TestHelmValues: the Helm values' configs.cm holds the same entries.
func TestHelmValues(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("install", "helm", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Configs      struct{ CM map[string]string }
		ExtraObjects []any `json:"extraObjects"`
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	checkConfigMapData(t, values.Configs.CM)
	var docs []string
	for _, o := range values.ExtraObjects {
		d, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(d))
	}
	checkPlanApprovalRBAC(t, strings.Join(docs, "---\n"))
}

// checkPlanApprovalRBAC: the RBAC objects (YAML documents) let the
// ServiceAccount argocd-server of namespace argocd, and only it, create
// PlanApprovals, and nothing else.
func checkPlanApprovalRBAC(t *testing.T, docs string) {
	t.Helper()
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	parts := strings.Split(docs, "---\n")
	if len(parts) != 2 {
		t.Fatalf("RBAC: %d documents, want 2:\n%s", len(parts), docs)
	}
	if err := yaml.UnmarshalStrict([]byte(parts[0]), &role); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(parts[1]), &binding); err != nil {
		t.Fatal(err)
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{"stackflow.io"}, Resources: []string{"planapprovals"}, Verbs: []string{"create"}}}
	if role.Kind != "ClusterRole" || !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("ClusterRole %+v, want rules %+v", role, want)
	}
	if binding.Kind != "ClusterRoleBinding" || binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 ||
		binding.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: "argocd-server", Namespace: "argocd"}) {
		t.Errorf("ClusterRoleBinding %+v", binding)
	}
	if ArgoCDServerIdentity != "system:serviceaccount:"+binding.Subjects[0].Namespace+":"+binding.Subjects[0].Name {
		t.Errorf("the actions name %s as approver, the RBAC binds %+v", ArgoCDServerIdentity, binding.Subjects)
	}
}

// checkConfigMapData reads argocd-cm data the way Argo CD's settings manager
// does and checks it yields Overrides(), and that the health it gives for
// every fixture is the expected one.
func checkConfigMapData(t *testing.T, data map[string]string) {
	t.Helper()
	got, err := resourceOverridesFromSplitKeys(data)
	if err != nil {
		t.Fatal(err)
	}
	want := overrides(t)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("argocd-cm yields overrides\n%+v\nwant\n%+v", got, want)
	}
	cs, err := Customizations()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		o := got[c.Key()]
		if c.Actions == nil {
			continue
		}
		actions, err := o.GetActions()
		if err != nil {
			t.Fatalf("%s: Argo CD cannot read the actions: %v", c.Key(), err)
		}
		if !reflect.DeepEqual(actions, *c.Actions) {
			t.Fatalf("%s: actions read back as %+v", c.Key(), actions)
		}
	}
	for _, tc := range healthCases {
		obj := fixture(t, tc.fixture)
		h, err := health.GetResourceHealth(obj, luaOverrides(got))
		if err != nil {
			t.Fatal(err)
		}
		if obj.GetDeletionTimestamp() == nil && (h.Status != tc.status || !matches(h.Message, tc.message)) {
			t.Errorf("%s: installed health %s %q, want %s %q", tc.fixture, h.Status, h.Message, tc.status, tc.message)
		}
	}
}

// resourceOverridesFromSplitKeys is Argo CD v2.14's reading of
// resource.customizations.<type>.<group>_<Kind> keys
// (util/settings SettingsManager.appendResourceOverridesFromSplitKeys, which
// cannot be imported here: util/settings needs modules this repository does
// not carry).
func resourceOverridesFromSplitKeys(data map[string]string) (map[string]v1alpha1.ResourceOverride, error) {
	out := map[string]v1alpha1.ResourceOverride{}
	for k, v := range data {
		if !strings.HasPrefix(k, "resource.customizations") {
			continue
		}
		parts := strings.SplitN(k, ".", 4)
		if len(parts) < 4 {
			continue
		}
		gk := strings.Split(parts[3], "_")
		if len(gk) != 2 {
			return nil, fmt.Errorf("key %s: group kind should be <group>_<Kind>", k)
		}
		key := gk[0] + "/" + gk[1]
		o := out[key]
		switch parts[2] {
		case "health":
			o.HealthLua = v
		case "useOpenLibs":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, err
			}
			o.UseOpenLibs = b
		case "actions":
			o.Actions = v
		default:
			return nil, fmt.Errorf("key %s: customization type %s", k, parts[2])
		}
		out[key] = o
	}
	return out, nil
}
