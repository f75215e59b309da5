package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/artifact"
)

func stalledWith(reason, substr string) func(*pulumiv1.Stack) bool {
	return func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.StalledCondition)
		return c != nil && c.Reason == reason && strings.Contains(c.Message, substr)
	}
}

func readyState(s *pulumiv1.Stack) bool {
	c := condition(s, pulumiv1.ReadyCondition)
	return c != nil && c.Status == metav1.ConditionTrue && s.Status.ObservedGeneration == s.Generation
}

// TestStackMissingInputsStallThenRecover: a missing Secret, Program or branch
// stalls the Stack with a message naming it; when it appears the Stack
// recovers by itself.
func TestStackMissingInputsStallThenRecover(t *testing.T) {
	e, repo := stackEnv(t)
	ctx := context.Background()
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})

	secretRef := newStack(e.ns, "needs-secret", pulumiv1.StackSpec{Stack: "needs-secret", GitSource: gitSpec(repo.URL(), "", sha),
		Config: cfg("recordName", "needs-secret", "content", "some-content"),
		SecretRefs: map[string]pulumiv1.ResourceRef{"password": {SelectorType: pulumiv1.ResourceSelectorSecret,
			ResourceSelector: pulumiv1.ResourceSelector{SecretRef: &pulumiv1.SecretSelector{Name: "late-secret", Key: "password"}}}}})
	programRef := newStack(e.ns, "needs-program", pulumiv1.StackSpec{Stack: "needs-program", ProgramRef: &pulumiv1.ProgramReference{Name: "late-program"}})
	branch := newStack(e.ns, "needs-branch", pulumiv1.StackSpec{Stack: "needs-branch", GitSource: gitSpec(repo.URL(), "release", ""),
		Config: cfg("recordName", "needs-branch", "content", "some-content")})
	for _, s := range []*pulumiv1.Stack{secretRef, programRef, branch} {
		if err := cp.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	waitStack(t, secretRef, time.Minute, "stalled", stalledWith(pulumiv1.StalledSourceUnavailableReason, "secretsRef password: secret late-secret not found"))
	waitStack(t, programRef, time.Minute, "stalled", stalledWith(pulumiv1.StalledSourceUnavailableReason, "program late-program not found"))
	waitStack(t, branch, time.Minute, "stalled", stalledWith(pulumiv1.StalledSourceUnavailableReason, "branch release not found"))

	if err := cp.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "late-secret"},
		StringData: map[string]string{"password": "pw-value-1234"}}); err != nil {
		t.Fatal(err)
	}
	p := &pulumiv1.Program{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "late-program"}, Program: pulumiv1.ProgramSpec{
		Resources: map[string]pulumiv1.Resource{"rec": {Type: "stackflowtest:index:Record", Properties: map[string]pulumiv1.Expression{
			"name": {Raw: []byte(`"needs-program"`)}, "content": {Raw: []byte(`"from-program"`)}}}}}}
	if err := cp.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	repo.Branch(t, "release")
	repo.Commit(t, "release branch", map[string]string{"README": "release"})

	for _, s := range []*pulumiv1.Stack{secretRef, programRef, branch} {
		waitStack(t, s, 3*time.Minute, "recovered", readyState)
	}
	if got, _ := e.pe.Record(t, "needs-program"); got != "from-program" {
		t.Fatalf("program record = %q", got)
	}
}

// TestStackFromFluxSource: a Stack whose fluxSource names a Flux GitRepository
// deploys the artifact the source's status points at. Flux is not installed
// here: the test installs a CRD for source.toolkit.fluxcd.io/v1 GitRepository
// and serves the artifact over HTTP, as source-controller would.
func TestStackFromFluxSource(t *testing.T) {
	e, _ := stackEnv(t)
	ctx := context.Background()
	installFluxGitRepositoryCRD(t)

	tarball, err := artifact.TarGz(map[string][]byte{"infra/Pulumi.yaml": []byte(strings.Replace(stackProgram, "name: stacks", "name: fluxed", 1))})
	if err != nil {
		t.Fatal(err)
	}
	tarball2, err := artifact.TarGz(map[string][]byte{"infra/Pulumi.yaml": []byte(strings.Replace(strings.Replace(stackProgram, "name: stacks", "name: fluxed", 1), "content: ${content}", "content: v2-${content}", 1))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/gzip")
		if strings.HasSuffix(r.URL.Path, "-v2.tar.gz") {
			_, _ = w.Write(tarball2)
			return
		}
		_, _ = w.Write(tarball)
	}))
	defer srv.Close()
	const revision = "main@sha1:0123456789abcdef0123456789abcdef01234567"
	repo := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
		"metadata": map[string]any{"name": "infra", "namespace": e.ns},
		"spec":     map[string]any{"url": "https://example.com/acme/infra", "interval": "1m"},
		"status": map[string]any{"artifact": map[string]any{
			"url": srv.URL + "/gitrepository/infra.tar.gz", "digest": artifact.Digest(tarball), "revision": revision,
			"path": "gitrepository/infra.tar.gz", "lastUpdateTime": "2026-11-29T00:00:00Z",
		}},
	}}
	if err := cp.Client.Create(ctx, repo); err != nil {
		t.Fatal(err)
	}
	s := newStack(e.ns, "fluxed", pulumiv1.StackSpec{Stack: "fluxed",
		FluxSource: &pulumiv1.FluxSource{Dir: "infra", SourceRef: pulumiv1.FluxSourceReference{APIVersion: "source.toolkit.fluxcd.io/v1", Kind: "GitRepository", Name: "infra"}},
		Config:     cfg("recordName", "fluxed", "content", "flux-content")})
	if err := cp.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	waitStack(t, s, 3*time.Minute, "ready", readyAt(revision))
	if got, _ := e.pe.Record(t, "fluxed"); got != "flux-content" {
		t.Fatalf("record = %q", got)
	}

	// source-controller publishes a new artifact: the Stack (which has no
	// branch to poll) deploys it because it watches the source.
	const revision2 = "main@sha1:89abcdef0123456789abcdef0123456789abcdef"
	start := time.Now()
	mutate(t, repo, func() {
		_ = unstructured.SetNestedMap(repo.Object, map[string]any{
			"url": srv.URL + "/gitrepository/infra-v2.tar.gz", "digest": artifact.Digest(tarball2), "revision": revision2,
			"path": "gitrepository/infra-v2.tar.gz", "lastUpdateTime": "2026-11-30T00:00:00Z",
		}, "status", "artifact")
	})
	waitStack(t, s, time.Minute, "ready at the new artifact", readyAt(revision2))
	if got, _ := e.pe.Record(t, "fluxed"); got != "v2-flux-content" {
		t.Fatalf("record after the new artifact = %q", got)
	}
	t.Logf("new Flux artifact deployed %s after source-controller published it", time.Since(start).Round(100*time.Millisecond))
}

func installFluxGitRepositoryCRD(t *testing.T) {
	t.Helper()
	preserve := true
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gitrepositories.source.toolkit.fluxcd.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "source.toolkit.fluxcd.io", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gitrepositories", Singular: "gitrepository", Kind: "GitRepository", ListKind: "GitRepositoryList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve}}}},
		},
	}
	if err := cp.Client.Create(context.Background(), crd); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the GitRepository CRD to be served", func() (bool, error) {
		var list unstructured.UnstructuredList
		list.SetAPIVersion("source.toolkit.fluxcd.io/v1")
		list.SetKind("GitRepositoryList")
		err := cp.Client.List(context.Background(), &list)
		return err == nil, err
	})
}
