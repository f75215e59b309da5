package install

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// kustomizeOnly are what the kustomize bases ship and the chart does not:
// Helm installs into a namespace it is given (helm install --create-namespace).
var kustomizeOnly = map[string]string{
	"Namespace/stackflow-system": "helm install --namespace stackflow-system --create-namespace makes it",
}

// essence is what must agree between the chart and the kustomize bases:
// per kind, the fields that decide what runs and what it may do. Labels and
// selectors differ by design (the chart adds app.kubernetes.io/instance).
func essence(t *testing.T, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	get := func(path ...string) any {
		v, _, err := unstructured.NestedFieldCopy(o.Object, path...)
		if err != nil {
			t.Fatalf("%s: %v", id(o), err)
		}
		return v
	}
	switch o.GetKind() {
	case "Deployment":
		var containers []any
		for _, c := range get("spec", "template", "spec", "containers").([]any) {
			c := c.(map[string]any)
			delete(c, "imagePullPolicy") // the chart sets it (image.pullPolicy)
			// Order carries no meaning in these lists (the args' order does).
			for _, k := range []string{"ports", "volumeMounts"} {
				c[k] = sortedByName(c[k])
			}
			containers = append(containers, c)
		}
		return map[string]any{
			"replicas":           get("spec", "replicas"),
			"serviceAccountName": get("spec", "template", "spec", "serviceAccountName"),
			"securityContext":    get("spec", "template", "spec", "securityContext"),
			"volumes":            sortedByName(get("spec", "template", "spec", "volumes")),
			"containers":         containers,
		}
	case "ClusterRole", "Role":
		return map[string]any{"rules": get("rules")}
	case "ClusterRoleBinding", "RoleBinding":
		return map[string]any{"roleRef": get("roleRef"), "subjects": get("subjects")}
	case "Service":
		return map[string]any{"ports": sortedByName(get("spec", "ports"))}
	case "CustomResourceDefinition":
		return map[string]any{"spec": get("spec")}
	case "ConfigMap":
		return map[string]any{"data": get("data")}
	}
	return map[string]any{}
}

// sortedByName sorts a list of objects by their "name".
func sortedByName(v any) any {
	l, ok := v.([]any)
	if !ok {
		return v
	}
	name := func(i int) string { n, _ := l[i].(map[string]any)["name"].(string); return n }
	sort.SliceStable(l, func(i, j int) bool { return name(i) < name(j) })
	return l
}

// compare fails with a readable diff wherever chart and kustomize disagree.
func compare(t *testing.T, chart, kust []*unstructured.Unstructured, kustOnly map[string]string) {
	t.Helper()
	c, k := byID(t, chart), byID(t, kust)
	for i := range k {
		if _, ok := c[i]; !ok && kustOnly[i] == "" {
			t.Errorf("kustomize ships %s, the chart does not", i)
		}
	}
	for i := range c {
		if _, ok := k[i]; !ok {
			t.Errorf("the chart ships %s, kustomize does not", i)
		}
	}
	for i, co := range c {
		ko, ok := k[i]
		if !ok {
			continue
		}
		if d := cmp.Diff(essence(t, ko), essence(t, co)); d != "" {
			t.Errorf("%s differs (-kustomize +chart):\n%s", i, d)
		}
	}
}

// union is the objects of several kustomize builds, each id once (both bases
// declare the namespace).
func union(t *testing.T, sets ...[]*unstructured.Unstructured) []*unstructured.Unstructured {
	seen := map[string]bool{}
	var out []*unstructured.Unstructured
	for _, set := range sets {
		for _, o := range set {
			if !seen[id(o)] {
				seen[id(o)] = true
				out = append(out, o)
			}
		}
	}
	return out
}

// TestChartMatchesKustomize renders the chart with its default values and
// builds operator/config/default and analysis/config/default: both ship the
// same objects with the same containers, arguments, images and RBAC rules.
func TestChartMatchesKustomize(t *testing.T) {
	root := substrate.RepoRoot()
	chart := render(t, "stackflow", "stackflow-system", "", true)
	kust := union(t,
		kustomize(t, filepath.Join(root, "operator", "config", "default")),
		kustomize(t, filepath.Join(root, "analysis", "config", "default")))
	compare(t, chart, kust, kustomizeOnly)
	if t.Failed() {
		t.Log("keep operator/charts/stackflow and operator/config (or analysis/config/default) equivalent")
	}
}

// TestChartMatchesKustomizeComponents compares chart values with the
// kustomize components over operator/config/default that do the same.
func TestChartMatchesKustomizeComponents(t *testing.T) {
	root := substrate.RepoRoot()
	for _, tc := range []struct{ component, values string }{
		{"webhook", "webhook: {enabled: true, secretName: stackflow-webhook}\n"},
		{"workspace-kube-auth", "operator: {workspaceAuth: kube}\n"},
		{"ssh-known-hosts", "operator: {sshKnownHosts: " + strconv.Quote(sshKnownHostsPlaceholder(t, root)) + "}\n"},
	} {
		t.Run(tc.component, func(t *testing.T) {
			overlay := t.TempDir()
			// kustomize refuses absolute paths of kustomizations: relative ones.
			rel := func(dir string) string {
				r, err := filepath.Rel(overlay, filepath.Join(root, "operator", "config", dir))
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			kz := "resources: [" + rel("default") + "]\ncomponents: [" + rel(tc.component) + "]\n"
			if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kz), 0o644); err != nil {
				t.Fatal(err)
			}
			chart := render(t, "stackflow", "stackflow-system", "analysis: {enabled: false}\n"+tc.values, true)
			compare(t, chart, kustomize(t, overlay), kustomizeOnly)
		})
	}
}

// sshKnownHostsPlaceholder is the known_hosts file the ssh-known-hosts
// component ships (overlays replace it).
func sshKnownHostsPlaceholder(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "operator", "config", "ssh-known-hosts", "known_hosts"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestChartRulesAreTheGeneratedRole: the operator's ClusterRole in the chart
// holds exactly the rules controller-gen wrote to operator/config/rbac/role.yaml.
func TestChartRulesAreTheGeneratedRole(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(substrate.RepoRoot(), "operator", "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	generated := decode(t, raw)[0]
	chart := find(t, render(t, "stackflow", "stackflow-system", "", false), "ClusterRole/stackflow-operator")
	if d := cmp.Diff(essence(t, generated), essence(t, chart)); d != "" {
		t.Errorf("the chart's operator rules differ from the generated role (-role.yaml +chart); run make generate:\n%s", d)
	}
}

// TestWebhookNeedsSecretName: webhook.enabled without webhook.secretName is
// refused at render time with a message naming the value.
func TestWebhookNeedsSecretName(t *testing.T) {
	if out := renderErr(t, "webhook: {enabled: true}\n"); !strings.Contains(out, "webhook.enabled needs webhook.secretName") {
		t.Errorf("render error %q does not name webhook.secretName", out)
	}
}

// TestChartLints runs helm lint's checks for the default values and each
// values case of TestChartInstalls: no warning, no error.
func TestChartLints(t *testing.T) {
	for _, values := range []string{"", "watchNamespaces: [a, b]\n", "webhook: {enabled: true, secretName: s}\n",
		"analysis: {enabled: false}\n", "networkPolicies: {enabled: true, workspaceNamespaces: [w]}\n",
		"metrics: {serviceMonitor: {enabled: true}}\n"} {
		args := []string{"--lint", "--chart", chartDir()}
		if values != "" {
			f := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--values", f)
		}
		if out, err := exec.Command(helmRender(t), args...).CombinedOutput(); err != nil {
			t.Errorf("helm lint with values %q: %v\n%s", values, err, out)
		}
	}
}
