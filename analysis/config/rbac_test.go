package config

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

func rulesOf(t *testing.T, o *unstructured.Unstructured) []rbacv1.PolicyRule {
	t.Helper()
	raw, err := json.Marshal(o.Object["rules"])
	if err != nil {
		t.Fatal(err)
	}
	var rules []rbacv1.PolicyRule
	if err := json.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	return rules
}

// grants flattens rules to "verb group/resource[/name]" and
// "verb nonResourceURL" strings, sorted.
func grants(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		for _, v := range r.Verbs {
			for _, u := range r.NonResourceURLs {
				out = append(out, v+" "+u)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					if len(r.ResourceNames) == 0 {
						out = append(out, v+" "+g+"/"+res)
					}
					for _, n := range r.ResourceNames {
						out = append(out, v+" "+g+"/"+res+"/"+n)
					}
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func wantGrants(t *testing.T, what string, rules []rbacv1.PolicyRule, want ...string) {
	t.Helper()
	sort.Strings(want)
	if got := grants(rules); !reflect.DeepEqual(got, want) {
		t.Errorf("%s grants\n  %v\nwant exactly\n  %v", what, got, want)
	}
}

// TestRBAC parses the roles of the installs and asserts they grant exactly
// what the brief lists, and nothing on Secrets outside the pulumi-cloud Role
// and the token refresher's Role (one named Secret each).
func TestRBAC(t *testing.T) {
	def := build(t, "default")
	wantGrants(t, "ClusterRole stackflow-analysis", rulesOf(t, find(t, def, "ClusterRole", "stackflow-analysis")),
		"get pulumi.com/stacks", "list pulumi.com/stacks", "watch pulumi.com/stacks",
		"get auto.pulumi.com/updates", "list auto.pulumi.com/updates", "watch auto.pulumi.com/updates",
		"create authentication.k8s.io/tokenreviews",
		"create authorization.k8s.io/subjectaccessreviews")
	wantGrants(t, "ClusterRole stackflow-stack-verifier", rulesOf(t, find(t, def, "ClusterRole", "stackflow-stack-verifier")),
		"get pulumi.com/stacks")
	wantGrants(t, "ClusterRole stackflow-pulumi-cloud-verifier", rulesOf(t, find(t, def, "ClusterRole", "stackflow-pulumi-cloud-verifier")),
		"get /v1/pulumi/*")
	crb := find(t, def, "ClusterRoleBinding", "stackflow-analysis")
	if ref, _, _ := unstructured.NestedString(crb.Object, "roleRef", "name"); ref != "stackflow-analysis" {
		t.Errorf("ClusterRoleBinding refers to %s", ref)
	}

	pc := build(t, "pulumi-cloud")
	wantGrants(t, "Role stackflow-analysis-pulumi-cloud", rulesOf(t, find(t, pc, "Role", "stackflow-analysis-pulumi-cloud")),
		"get /secrets/stackflow-analysis-pulumi-cloud")
	kp := build(t, "kargo-project")
	wantGrants(t, "Role stackflow-verifier-token-refresher", rulesOf(t, find(t, kp, "Role", "stackflow-verifier-token-refresher")),
		"create /serviceaccounts/token/stackflow-verifier",
		"get /secrets/"+TokenSecret, "update /secrets/"+TokenSecret)
	for _, dir := range []string{"default", "pulumi-cloud", "templates", "kargo-project"} {
		for _, o := range build(t, dir) {
			if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
				continue
			}
			if o.GetName() == "stackflow-analysis-pulumi-cloud" || o.GetName() == "stackflow-verifier-token-refresher" {
				continue // checked exactly above
			}
			for _, g := range grants(rulesOf(t, o)) {
				if strings.Contains(g, "secrets") || strings.HasPrefix(g, "* ") || strings.Contains(g, "*/") || strings.HasSuffix(g, "/*") && !strings.HasPrefix(g, "get /v1/pulumi/") {
					t.Errorf("%s: %s %s grants %q", dir, o.GetKind(), o.GetName(), g)
				}
			}
		}
	}
}

// can asks the API server whether a ServiceAccount may do something.
func can(t *testing.T, sa string, attrs authorizationv1.ResourceAttributes) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               "system:serviceaccount:" + sa,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + strings.Split(sa, ":")[0], "system:authenticated"},
		ResourceAttributes: &attrs,
	}}
	if err := k8s.Create(context.Background(), sar); err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed
}

// TestRBACOnTheAPIServer asks the real authoriser (envtest runs RBAC) what
// the installed bindings allow. It runs after TestInstallManifests created
// the objects (same package, source order), and creates them itself otherwise.
func TestRBACOnTheAPIServer(t *testing.T) {
	createNamespace(t, "my-project")
	createNamespace(t, "my-stacks")
	for _, dir := range []string{"default", "pulumi-cloud", "kargo-project"} {
		apply(t, build(t, dir))
	}
	svc := "stackflow-system:stackflow-analysis"
	var refused []authorizationv1.ResourceAttributes
	var refusedSA []string
	for _, tc := range []struct {
		sa    string
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		{svc, authorizationv1.ResourceAttributes{Verb: "watch", Group: "pulumi.com", Resource: "stacks"}, true},
		{svc, authorizationv1.ResourceAttributes{Verb: "list", Group: "auto.pulumi.com", Resource: "updates", Namespace: "my-stacks"}, true},
		{svc, authorizationv1.ResourceAttributes{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"}, true},
		{svc, authorizationv1.ResourceAttributes{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, true},
		{svc, authorizationv1.ResourceAttributes{Verb: "update", Group: "pulumi.com", Resource: "stacks", Namespace: "my-stacks"}, false},
		{svc, authorizationv1.ResourceAttributes{Verb: "get", Group: "pulumi.com", Resource: "programs", Namespace: "my-stacks"}, false},
		{svc, authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "my-stacks", Name: "x"}, false},
		{svc, authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "stackflow-system", Name: "stackflow-webhook"}, false},
		{svc, authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets", Namespace: "stackflow-system"}, false},
		// Granted by the pulumi-cloud overlay only.
		{svc, authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "stackflow-system", Name: "stackflow-analysis-pulumi-cloud"}, true},
		// The Kargo project's verifier: get stacks in my-stacks only.
		{"my-project:stackflow-verifier", authorizationv1.ResourceAttributes{Verb: "get", Group: "pulumi.com", Resource: "stacks", Namespace: "my-stacks", Name: "app"}, true},
		{"my-project:stackflow-verifier", authorizationv1.ResourceAttributes{Verb: "get", Group: "pulumi.com", Resource: "stacks", Namespace: "other", Name: "app"}, false},
		{"my-project:stackflow-verifier", authorizationv1.ResourceAttributes{Verb: "list", Group: "pulumi.com", Resource: "stacks", Namespace: "my-stacks"}, false},
		{"my-project:stackflow-verifier", authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "my-stacks", Name: "x"}, false},
		// The token refresher: mints stackflow-verifier's tokens and
		// rewrites its token Secret, nothing else.
		{"my-project:stackflow-verifier-token-refresher", authorizationv1.ResourceAttributes{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "my-project", Name: "stackflow-verifier"}, true},
		{"my-project:stackflow-verifier-token-refresher", authorizationv1.ResourceAttributes{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "my-project", Name: "stackflow-verifier-token-refresher"}, false},
		{"my-project:stackflow-verifier-token-refresher", authorizationv1.ResourceAttributes{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "my-project", Name: "default"}, false},
		{"my-project:stackflow-verifier-token-refresher", authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "my-project", Name: TokenSecret}, true},
		{"my-project:stackflow-verifier-token-refresher", authorizationv1.ResourceAttributes{Verb: "update", Resource: "secrets", Namespace: "my-project", Name: TokenSecret}, true},
		{"my-project:stackflow-verifier-token-refresher", authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "my-project", Name: "git-credentials"}, false},
		{"my-project:stackflow-verifier-token-refresher", authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets", Namespace: "my-project"}, false},
		{"my-project:stackflow-verifier-token-refresher", authorizationv1.ResourceAttributes{Verb: "delete", Resource: "secrets", Namespace: "my-project", Name: TokenSecret}, false},
		{"my-project:stackflow-verifier-token-refresher", authorizationv1.ResourceAttributes{Verb: "create", Resource: "secrets", Namespace: "my-project"}, false},
	} {
		what := fmt.Sprintf("%s %s %s/%s in %q (name %q)", tc.sa, tc.attrs.Verb, tc.attrs.Group, tc.attrs.Resource, tc.attrs.Namespace, tc.attrs.Name)
		if tc.want {
			// The authoriser learns of bindings just applied from its
			// informers, a moment later: what they allow is awaited.
			substrate.Eventually(t, 30*time.Second, what+" to be allowed", func() (bool, error) { return can(t, tc.sa, tc.attrs), nil })
		} else {
			refused = append(refused, tc.attrs)
			refusedSA = append(refusedSA, tc.sa)
		}
	}
	// Asked once every allowed request is: the bindings are in force, so a
	// refusal is the rules' answer, not the informers' delay.
	for i, attrs := range refused {
		if can(t, refusedSA[i], attrs) {
			t.Errorf("%s %s %s/%s in %q (name %q): allowed, want refused", refusedSA[i], attrs.Verb, attrs.Group, attrs.Resource, attrs.Namespace, attrs.Name)
		}
	}
}

// TestPulumiCloudVerifierOnTheAPIServer binds stackflow-pulumi-cloud-verifier
// to a ServiceAccount and asks the authoriser about request paths, as the
// service does for the /v1/pulumi/... routes.
func TestPulumiCloudVerifierOnTheAPIServer(t *testing.T) {
	createNamespace(t, "my-project")
	apply(t, build(t, "default"))
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-pulumi-cloud-verifier"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "stackflow-pulumi-cloud-verifier"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "cloud-verifier", Namespace: "my-project"}},
	}
	if err := k8s.Create(context.Background(), crb); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	allowed := func(path string) (bool, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:                  "system:serviceaccount:my-project:cloud-verifier",
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"},
		}}
		if err := k8s.Create(context.Background(), sar); err != nil {
			return false, err
		}
		return sar.Status.Allowed, nil
	}
	// The API server's authoriser learns of the binding from its informers,
	// a moment after the create: the allowed path is awaited, and the
	// refusals are asked only once it answers.
	substrate.Eventually(t, 30*time.Second, "the binding to allow get /v1/pulumi/acme/infra/prod/verification", func() (bool, error) {
		return allowed("/v1/pulumi/acme/infra/prod/verification")
	})
	for _, path := range []string{"/v1/namespaces/x/stacks/y/verification", "/metrics"} {
		got, err := allowed(path)
		if err != nil {
			t.Fatal(err)
		}
		if got {
			t.Errorf("get %s: allowed, want refused", path)
		}
	}
}
