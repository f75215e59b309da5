package config

import (
	"context"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// configDir is analysis/config.
func configDir() string { return filepath.Join(substrate.RepoRoot(), "analysis", "config") }

// build builds the kustomization in analysis/config/<dir> with the
// kustomize API, as `kubectl apply -k` would.
func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(configDir(), dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		// Through JSON, so numbers are int64 as the API machinery expects.
		raw, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(raw); err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}

// ids lists kind/namespace/name of objects, sorted.
func ids(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		id := o.GetKind() + "/"
		if o.GetNamespace() != "" {
			id += o.GetNamespace() + "/"
		}
		out = append(out, id+o.GetName())
	}
	sort.Strings(out)
	return out
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s in %v", kind, name, ids(objs))
	return nil
}

var (
	dryRun      = []string{metav1.DryRunAll}
	strict      = metav1.FieldValidationStrict
	strictCreat = []client.CreateOption{&client.CreateOptions{FieldValidation: strict}}
)

// apply creates each object on the API server with strict field validation,
// first as a dry run, then for real; an object that already exists (one
// kustomization including another) is updated the same way.
func apply(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	for _, o := range objs {
		id := o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
		err := k8s.Create(ctx, o.DeepCopy(), &client.CreateOptions{FieldValidation: strict, DryRun: dryRun})
		if apierrors.IsAlreadyExists(err) {
			cur := &unstructured.Unstructured{}
			cur.SetGroupVersionKind(o.GroupVersionKind())
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(o), cur); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			upd := o.DeepCopy()
			upd.SetResourceVersion(cur.GetResourceVersion())
			if err := k8s.Update(ctx, upd.DeepCopy(), &client.UpdateOptions{FieldValidation: strict, DryRun: dryRun}); err != nil {
				t.Fatalf("%s rejected (dry-run update): %v", id, err)
			}
			if err := k8s.Update(ctx, upd, &client.UpdateOptions{FieldValidation: strict}); err != nil {
				t.Fatalf("%s rejected (update): %v", id, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s rejected (dry run): %v", id, err)
		}
		if err := k8s.Create(ctx, o.DeepCopy(), strictCreat...); err != nil {
			t.Fatalf("%s rejected: %v", id, err)
		}
	}
}

func createNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k8s.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func wantIDs(t *testing.T, dir string, objs []*unstructured.Unstructured, want ...string) {
	t.Helper()
	sort.Strings(want)
	if got := ids(objs); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("%s builds\n  %v\nwant\n  %v", dir, got, want)
	}
}

// TestInstallManifests builds every kustomization under analysis/config and
// creates its objects on the real API server (Stackflow and Argo Rollouts
// CRDs installed) with strict field validation.
func TestInstallManifests(t *testing.T) {

	t.Run("default", func(t *testing.T) {
		objs := build(t, "default")
		wantIDs(t, "default", objs,
			"Namespace/stackflow-system",
			"ServiceAccount/stackflow-system/stackflow-analysis",
			"ClusterRole/stackflow-analysis", "ClusterRoleBinding/stackflow-analysis",
			"ClusterRole/stackflow-stack-verifier", "ClusterRole/stackflow-pulumi-cloud-verifier",
			"Service/stackflow-system/stackflow-analysis",
			"Deployment/stackflow-system/stackflow-analysis")
		apply(t, objs)
	})

	t.Run("pulumi-cloud", func(t *testing.T) {
		objs := build(t, "pulumi-cloud")
		wantIDs(t, "pulumi-cloud", objs, append(ids(build(t, "default")),
			"Role/stackflow-system/stackflow-analysis-pulumi-cloud",
			"RoleBinding/stackflow-system/stackflow-analysis-pulumi-cloud")...)
		apply(t, objs)
	})

	t.Run("templates", func(t *testing.T) {
		objs := build(t, "templates")
		wantIDs(t, "templates", objs,
			"AnalysisTemplate/"+AppliedTemplate, "AnalysisTemplate/"+PreviewedTemplate,
			"ClusterAnalysisTemplate/"+AppliedTemplate, "ClusterAnalysisTemplate/"+PreviewedTemplate)
		createNamespace(t, "templates-test")
		for _, o := range objs {
			if o.GetKind() == "AnalysisTemplate" {
				o.SetNamespace("templates-test")
			}
		}
		apply(t, objs)
	})

	t.Run("kargo-project", func(t *testing.T) {
		objs := build(t, "kargo-project")
		wantIDs(t, "kargo-project", objs,
			"ServiceAccount/my-project/stackflow-verifier",
			"Secret/my-project/"+TokenSecret,
			"ServiceAccount/my-project/stackflow-verifier-token-refresher",
			"Role/my-project/stackflow-verifier-token-refresher",
			"RoleBinding/my-project/stackflow-verifier-token-refresher",
			"CronJob/my-project/stackflow-verifier-token",
			"RoleBinding/my-stacks/stackflow-verifier-my-project")
		createNamespace(t, "my-project")
		createNamespace(t, "my-stacks")
		apply(t, objs)
	})
}

// TestDeploymentSecurity checks the Deployment against the brief: it would
// also be admitted by restricted Pod Security, which envtest does not run.
func TestDeploymentSecurity(t *testing.T) {
	d := find(t, build(t, "default"), "Deployment", "stackflow-analysis")
	get := func(path ...string) any {
		v, _, err := unstructured.NestedFieldNoCopy(d.Object, path...)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if r := get("spec", "replicas"); r != int64(2) {
		t.Errorf("replicas %v, want 2", r)
	}
	if v := get("spec", "template", "spec", "securityContext", "runAsNonRoot"); v != true {
		t.Errorf("pod runAsNonRoot %v", v)
	}
	if v := get("spec", "template", "spec", "securityContext", "seccompProfile", "type"); v != "RuntimeDefault" {
		t.Errorf("seccompProfile %v", v)
	}
	if v := get("spec", "template", "spec", "serviceAccountName"); v != "stackflow-analysis" {
		t.Errorf("serviceAccountName %v", v)
	}
	containers := get("spec", "template", "spec", "containers").([]any)
	if len(containers) != 1 {
		t.Fatalf("%d containers", len(containers))
	}
	c := containers[0].(map[string]any)
	sc := c["securityContext"].(map[string]any)
	if sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false {
		t.Errorf("container securityContext %v", sc)
	}
	if drop := sc["capabilities"].(map[string]any)["drop"].([]any); len(drop) != 1 || drop[0] != "ALL" {
		t.Errorf("capabilities.drop %v", drop)
	}
	if _, ok := c["resources"].(map[string]any)["requests"]; !ok {
		t.Errorf("no resource requests")
	}
	ports := c["ports"].([]any)
	if len(ports) != 1 || ports[0].(map[string]any)["name"] != "http" || ports[0].(map[string]any)["containerPort"] != int64(8080) {
		t.Errorf("ports %v, want http 8080", ports)
	}
	for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		hg := c[probe].(map[string]any)["httpGet"].(map[string]any)
		if hg["path"] != path || hg["port"] != "http" {
			t.Errorf("%s %v, want %s on http", probe, hg, path)
		}
	}
	svc := find(t, build(t, "default"), "Service", "stackflow-analysis")
	sp, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(sp) != 1 || sp[0].(map[string]any)["name"] != "http" || sp[0].(map[string]any)["port"] != int64(8080) {
		t.Errorf("service ports %v", sp)
	}
	// The Pulumi Cloud overlay adds exactly the flag.
	pd := find(t, build(t, "pulumi-cloud"), "Deployment", "stackflow-analysis")
	pc, _, _ := unstructured.NestedSlice(pd.Object, "spec", "template", "spec", "containers")
	args := pc[0].(map[string]any)["args"].([]any)
	base := c["args"].([]any)
	if len(args) != len(base)+1 || args[len(args)-1] != "--pulumi-cloud-token-secret=stackflow-system/stackflow-analysis-pulumi-cloud" {
		t.Errorf("pulumi-cloud args %v", args)
	}
}
