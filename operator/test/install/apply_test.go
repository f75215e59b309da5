package install

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

var (
	cpOnce sync.Once
	cp     *substrate.ControlPlane
	cpErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cp != nil {
		_ = cp.Stop()
	}
	os.Exit(code)
}

// controlPlane starts the shared control plane (the built kube-apiserver and
// etcd with the Stackflow CRDs) on first use: the comparisons need none.
func controlPlane(t *testing.T) *substrate.ControlPlane {
	t.Helper()
	substrate.MustLocate(t)
	cpOnce.Do(func() { cp, cpErr = substrate.StartControlPlane() })
	if cpErr != nil {
		t.Fatal(cpErr)
	}
	return cp
}

// apply applies each object server-side with strict field validation, first
// as a dry run, then for real, as `kubectl apply --server-side` does.
func apply(t *testing.T, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	opts := []client.PatchOption{client.FieldOwner("stackflow-install-test"), client.ForceOwnership, client.FieldValidation(metav1.FieldValidationStrict)}
	for _, o := range objs {
		if err := c.Patch(ctx, o.DeepCopy(), client.Apply, append(opts, client.DryRunAll)...); err != nil {
			t.Fatalf("%s rejected (server-side apply, dry run): %v", id(o), err)
		}
	}
	for _, o := range objs {
		if err := c.Patch(ctx, o.DeepCopy(), client.Apply, opts...); err != nil {
			t.Fatalf("%s rejected (server-side apply): %v", id(o), err)
		}
	}
	// What was applied is there.
	for _, o := range objs {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
			t.Fatalf("%s after apply: %v", id(o), err)
		}
	}
}

// installServiceMonitorCRD installs testdata/servicemonitor-crd.yaml once.
func installServiceMonitorCRD(t *testing.T, cp *substrate.ControlPlane) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "servicemonitor-crd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(raw, crd); err != nil {
		t.Fatal(err)
	}
	if _, err := substrate.InstallCRDsWith(cp.Config, envtest.CRDInstallOptions{
		CRDs: []*apiextensionsv1.CustomResourceDefinition{crd},
	}); err != nil {
		t.Fatal(err)
	}
}

// access asks the API server whether the ServiceAccount ns/name may do verb on
// group/resource in namespace ("" cluster-wide).
func access(t *testing.T, c client.Client, ns, name, verb, group, resource, namespace string) bool {
	t.Helper()
	return accessNamed(t, c, ns, name, verb, group, resource, namespace, "")
}

// accessNamed is access to one object (object "" is any); resource may name
// a subresource ("workspaces/rpc").
func accessNamed(t *testing.T, c client.Client, ns, name, verb, group, resource, namespace, object string) bool {
	t.Helper()
	res, sub, _ := strings.Cut(resource, "/")
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + ns + ":" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: verb, Group: group, Resource: res, Subresource: sub, Name: object,
		},
	}}
	if err := c.Create(context.Background(), sar); err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed
}

// args is the args of the first container of the Deployment with id.
func args(t *testing.T, objs []*unstructured.Unstructured, deployment string) string {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(find(t, objs, deployment).Object, "spec", "template", "spec", "containers")
	a, _, _ := unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
	return strings.Join(a, " ")
}

// installCase is one set of values, installed as its own release into a
// namespace of its own.
type installCase struct {
	name string
	// values are the chart values; {ns} is the release namespace, {a} and
	// {b} two more namespaces.
	values string
	crds   bool
	check  func(t *testing.T, c client.Client, objs []*unstructured.Unstructured, rel, ns, a, b string)
}

// TestChartInstalls renders the chart for each case and applies it
// server-side (dry run, then for real) with strict field validation, then
// checks what the case is about, RBAC by SubjectAccessReviews.
func TestChartInstalls(t *testing.T) {
	cp := controlPlane(t)
	installServiceMonitorCRD(t, cp)
	for _, tc := range []installCase{{
		name: "default", crds: true,
		check: func(t *testing.T, c client.Client, objs []*unstructured.Unstructured, rel, ns, a, _ string) {
			op := args(t, objs, "Deployment/"+ns+"/"+rel+"-operator")
			if strings.Contains(op, "--webhook") || strings.Contains(op, "--watch-namespaces") {
				t.Errorf("default operator args %q: want no webhook and no watch-namespaces flags", op)
			}
			for _, o := range objs {
				if k := o.GetKind(); k == "NetworkPolicy" || k == "ServiceMonitor" {
					t.Errorf("default values render %s", id(o))
				}
			}
			if !access(t, c, ns, rel+"-operator", "list", "pulumi.com", "stacks", "") {
				t.Error("the operator may not list Stacks cluster-wide")
			}
			if !access(t, c, ns, rel+"-analysis", "list", "pulumi.com", "stacks", a) {
				t.Error("the analysis service may not list Stacks")
			}
		},
	}, {
		name:   "namespaced",
		values: "watchNamespaces: [{a}, {b}]\n",
		check: func(t *testing.T, c client.Client, objs []*unstructured.Unstructured, rel, ns, a, b string) {
			for _, unwanted := range []string{"ClusterRole/" + rel + "-operator", "ClusterRoleBinding/" + rel + "-operator"} {
				if has(objs, unwanted) {
					t.Errorf("namespaced mode renders %s", unwanted)
				}
			}
			for _, d := range []string{"operator", "analysis"} {
				if got := args(t, objs, "Deployment/"+ns+"/"+rel+"-"+d); !strings.Contains(got, "--watch-namespaces="+a+","+b) {
					t.Errorf("%s args %q: want --watch-namespaces=%s,%s", d, got, a, b)
				}
			}
			for _, sa := range []string{rel + "-operator", rel + "-analysis"} {
				for _, n := range []string{a, b} {
					if !access(t, c, ns, sa, "watch", "pulumi.com", "stacks", n) {
						t.Errorf("%s may not watch Stacks in watched namespace %s", sa, n)
					}
				}
				for _, n := range []string{"", "default", ns} {
					if access(t, c, ns, sa, "list", "pulumi.com", "stacks", n) {
						t.Errorf("%s may list Stacks in %q, outside the watched namespaces", sa, n)
					}
				}
			}
			if access(t, c, ns, rel+"-operator", "list", "", "secrets", ns) {
				t.Error("the operator may list Secrets of its own (unwatched) namespace")
			}
			if !access(t, c, ns, rel+"-operator", "create", "", "secrets", ns) {
				t.Error("the operator may not create its inputs digest key Secret")
			}
			if !access(t, c, ns, rel+"-analysis", "create", "authentication.k8s.io", "tokenreviews", "") {
				t.Error("the analysis service may not create TokenReviews")
			}
		},
	}, {
		name:   "shards",
		values: "operator:\n  shards: [blue, green]\n",
		check: func(t *testing.T, c client.Client, objs []*unstructured.Unstructured, rel, ns, _, _ string) {
			if def := args(t, objs, "Deployment/"+ns+"/"+rel+"-operator"); !strings.Contains(def, "--watch-label-selector=!sharding.stackflow.io/key") ||
				strings.Contains(def, "--leader-elect-id=") {
				t.Errorf("default shard args %q: want the unlabelled objects and the default Lease", def)
			}
			for _, sh := range []string{"blue", "green"} {
				name := rel + "-operator-" + sh
				got := args(t, objs, "Deployment/"+ns+"/"+name)
				for _, want := range []string{"--watch-label-selector=sharding.stackflow.io/key=" + sh, "--leader-elect-id=stackflow-operator-" + sh + ".pulumi.com",
					"--artifact-base-url=http://" + name + "." + ns + ".svc:9090"} {
					if !strings.Contains(got, want) {
						t.Errorf("shard %s args %q: want %s", sh, got, want)
					}
				}
				d := find(t, objs, "Deployment/"+ns+"/"+name)
				sel, _, _ := unstructured.NestedStringMap(d.Object, "spec", "selector", "matchLabels")
				if sel["stackflow.io/shard"] != sh || sel["app.kubernetes.io/name"] != "stackflow-operator-shard" {
					t.Errorf("shard %s Deployment selector %v: it must select that shard's pods only", sh, sel)
				}
				svc := find(t, objs, "Service/"+ns+"/"+name)
				if ssel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector"); ssel["stackflow.io/shard"] != sh {
					t.Errorf("shard %s Service selector %v: its artifacts are served by its own pods", sh, ssel)
				}
			}
			if def := find(t, objs, "Deployment/"+ns+"/"+rel+"-operator"); true {
				sel, _, _ := unstructured.NestedStringMap(def.Object, "spec", "selector", "matchLabels")
				if sel["app.kubernetes.io/name"] != "stackflow-operator" || sel["stackflow.io/shard"] != "" {
					t.Errorf("default Deployment selector %v changed: an upgrade could not apply it (selectors are immutable)", sel)
				}
			}
		},
	}, {
		name:   "webhook",
		values: "webhook: {enabled: true, secretName: push-secret}\n",
		check: func(t *testing.T, c client.Client, objs []*unstructured.Unstructured, rel, ns, _, _ string) {
			op := args(t, objs, "Deployment/"+ns+"/"+rel+"-operator")
			if !strings.Contains(op, "--webhook-bind-address=:9292") || !strings.Contains(op, "--webhook-secret-file=/etc/stackflow/webhook/secret") {
				t.Errorf("operator args %q: want the webhook flags", op)
			}
			vols, _, _ := unstructured.NestedSlice(find(t, objs, "Deployment/"+ns+"/"+rel+"-operator").Object, "spec", "template", "spec", "volumes")
			if !strings.Contains(fmt.Sprint(vols), "secretName:push-secret") {
				t.Errorf("volumes %v: want the Secret push-secret", vols)
			}
			ports, _, _ := unstructured.NestedSlice(find(t, objs, "Service/"+ns+"/"+rel+"-operator").Object, "spec", "ports")
			if !strings.Contains(fmt.Sprint(ports), "name:webhook") {
				t.Errorf("operator Service ports %v: want webhook", ports)
			}
		},
	}, {
		name:   "ssh-known-hosts",
		values: "operator: {sshKnownHosts: \"github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\\n\"}\n",
		check: func(t *testing.T, _ client.Client, objs []*unstructured.Unstructured, rel, ns, _, _ string) {
			if op := args(t, objs, "Deployment/"+ns+"/"+rel+"-operator"); !strings.Contains(op, "--ssh-known-hosts=/etc/stackflow/ssh/known_hosts") {
				t.Errorf("operator args %q: want --ssh-known-hosts", op)
			}
			cm := find(t, objs, "ConfigMap/"+ns+"/"+rel+"-operator-ssh-known-hosts")
			if kh, _, _ := unstructured.NestedString(cm.Object, "data", "known_hosts"); !strings.HasPrefix(kh, "github.com ssh-ed25519 ") {
				t.Errorf("known_hosts ConfigMap holds %q", kh)
			}
			vols, _, _ := unstructured.NestedSlice(find(t, objs, "Deployment/"+ns+"/"+rel+"-operator").Object, "spec", "template", "spec", "volumes")
			if !strings.Contains(fmt.Sprint(vols), "name:"+rel+"-operator-ssh-known-hosts") {
				t.Errorf("volumes %v: want the known_hosts ConfigMap", vols)
			}
		},
	}, {
		name:   "no-analysis",
		values: "analysis: {enabled: false}\n",
		check: func(t *testing.T, _ client.Client, objs []*unstructured.Unstructured, rel, _, _, _ string) {
			for _, o := range objs {
				if n := strings.TrimPrefix(o.GetName(), rel+"-"); strings.HasPrefix(n, "analysis") || strings.HasSuffix(n, "-verifier") {
					t.Errorf("analysis.enabled=false renders %s", id(o))
				}
			}
		},
	}, {
		name:   "network-policies",
		values: "networkPolicies: {enabled: true, workspaceNamespaces: [{a}]}\nwebhook: {enabled: true, secretName: push-secret}\n",
		check: func(t *testing.T, _ client.Client, objs []*unstructured.Unstructured, rel, ns, a, _ string) {
			for _, want := range []string{
				"NetworkPolicy/" + a + "/" + rel + "-workspace-agents",
				"NetworkPolicy/" + ns + "/" + rel + "-operator",
				"NetworkPolicy/" + ns + "/" + rel + "-analysis",
			} {
				find(t, objs, want)
			}
			np := find(t, objs, "NetworkPolicy/"+a+"/"+rel+"-workspace-agents")
			ingress, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
			if got := fmt.Sprint(ingress); len(ingress) != 1 || !strings.Contains(got, "port:50051") || !strings.Contains(got, "values:[stackflow-operator stackflow-operator-shard]") ||
				!strings.Contains(got, "app.kubernetes.io/instance:"+rel) || !strings.Contains(got, "kubernetes.io/metadata.name:"+ns) {
				t.Errorf("workspace agents ingress %v: want only the operator pods (of every shard) of %s on 50051", got, ns)
			}
		},
	}, {
		name:   "lockdown",
		values: "watchNamespaces: [{a}]\noperator: {workspaceAuth: kube}\nlockdown: {defaultWorkspaceServiceAccount: workspace, podSecurityEnforcement: restricted}\n",
		check: func(t *testing.T, c client.Client, objs []*unstructured.Unstructured, rel, ns, a, b string) {
			dep := find(t, objs, "Deployment/"+ns+"/"+rel+"-operator")
			op := args(t, objs, "Deployment/"+ns+"/"+rel+"-operator")
			for _, want := range []string{"--workspace-auth=kube", "--workspace-token-file=/var/run/secrets/stackflow/agent/token",
				"--default-workspace-service-account=workspace", "--pod-security-enforcement=restricted"} {
				if !strings.Contains(op, want) {
					t.Errorf("operator args %q lack %s", op, want)
				}
			}
			vols, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "volumes")
			if got := fmt.Sprint(vols); !strings.Contains(got, "audience:stackflow-agent") || !strings.Contains(got, "path:token") {
				t.Errorf("volumes %v: want the projected agent token", got)
			}
			// Namespaces are cluster-scoped: only the watched one may be read.
			if !accessNamed(t, c, ns, rel+"-operator", "get", "", "namespaces", "", a) {
				t.Errorf("the operator may not read namespace %s's Pod Security labels", a)
			}
			if accessNamed(t, c, ns, rel+"-operator", "get", "", "namespaces", "", b) {
				t.Errorf("the operator may read namespace %s, which it does not watch", b)
			}
			if !access(t, c, ns, rel+"-operator", "use", "auto.pulumi.com", "workspaces/rpc", a) {
				t.Errorf("the operator may not use workspace agents in %s (kube auth)", a)
			}
		},
	}, {
		name:   "service-monitor",
		values: "metrics: {serviceMonitor: {enabled: true, labels: {release: prometheus}}}\n",
		check: func(t *testing.T, _ client.Client, objs []*unstructured.Unstructured, rel, ns, _, _ string) {
			find(t, objs, "ServiceMonitor/"+ns+"/"+rel+"-operator")
			find(t, objs, "ServiceMonitor/"+ns+"/"+rel+"-analysis")
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ns, a, b := cp.Namespace(t), cp.Namespace(t), cp.Namespace(t)
			rel := "sf-" + tc.name
			objs := render(t, rel, ns, strings.NewReplacer("{ns}", ns, "{a}", a, "{b}", b).Replace(tc.values), tc.crds)
			apply(t, cp.Client, objs)
			tc.check(t, cp.Client, objs, rel, ns, a, b)
			t.Cleanup(func() { deleteClusterScoped(cp.Client, objs) })
		})
	}
}

// deleteClusterScoped deletes the case's ClusterRoles and bindings (the
// namespaces go with their contents; the CRDs stay).
func deleteClusterScoped(c client.Client, objs []*unstructured.Unstructured) {
	for _, o := range objs {
		if o.GetNamespace() == "" && o.GetKind() != "CustomResourceDefinition" {
			_ = c.Delete(context.Background(), o)
		}
	}
}
