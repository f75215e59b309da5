package examples

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// api is the control plane shared by the tests: a real kube-apiserver with
// Stackflow's, Argo CD's, Argo Rollouts' and Kargo's CRDs. The tests only
// dry-run against it, so they cannot disturb each other.
var api struct {
	cp *substrate.ControlPlane
	c  client.Client
}

// exampleNamespaces are the namespaces the examples' objects name. They
// must exist for a dry run of a namespaced object (Argo CD would create
// infra and kargo-demo-stacks with CreateNamespace=true, Kargo creates
// kargo-demo for its Project, the argocd namespace comes with Argo CD;
// examples/chain applies its own chain first).
var exampleNamespaces = []string{"argocd", "infra", "kargo-demo", "kargo-demo-stacks", "chain"}

// kargoDir is Kargo v1.11.2's reference data (CRDs, step schemas): the
// parent of its source (../shared/kargo beside the repository root, or
// $STACKFLOW_KARGO_SRC/..).
func kargoDir() string { return filepath.Dir(substrate.KargoSource()) }

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	crdDirs, err := crdDirs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := substrate.Locate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cp, err := substrate.StartControlPlane()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = cp.Stop() }()
	for _, dir := range crdDirs {
		if _, err := substrate.InstallCRDsWith(cp.Config, envtest.CRDInstallOptions{Paths: []string{dir}, ErrorIfPathMissing: true}); err != nil {
			fmt.Fprintf(os.Stderr, "install the CRDs of %s: %v\n", dir, err)
			return 1
		}
	}
	// A client made after the CRDs exist, so that its REST mapper knows them.
	c, err := client.New(cp.Config, client.Options{Scheme: cp.Client.Scheme()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, ns := range exampleNamespaces {
		if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			fmt.Fprintf(os.Stderr, "create namespace %s: %v\n", ns, err)
			return 1
		}
	}
	api.cp, api.c = cp, c
	return m.Run()
}

// crdDirs finds the CRDs of Argo CD, Argo Rollouts and Kargo (Stackflow's
// are installed by the substrate), failing with what to do when the
// substrate was not built.
func crdDirs() ([]string, error) {
	paths, err := substrate.Locate()
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, build := range []struct{ dir, what string }{
		// Argo CD v3, which make test builds and the examples target (v2.14 is
		// built only by make test-argocd-2.14).
		{paths.ArgoCD3, "Argo CD v3"},
		{paths.Rollouts, "Argo Rollouts"},
	} {
		if _, err := os.Stat(filepath.Join(build.dir, ".complete")); err != nil {
			return nil, fmt.Errorf("the build of %s in %s is not complete (%v): run `make substrate`", build.what, build.dir, err)
		}
		dirs = append(dirs, filepath.Join(build.dir, "crds"))
	}
	kargo := filepath.Join(kargoDir(), "crds")
	if _, err := os.Stat(kargo); err != nil {
		return nil, fmt.Errorf("Kargo v1.11.2's CRDs are expected in %s (the shared Kargo reference data beside the repository root): %v", kargo, err)
	}
	return append(dirs, kargo), nil
}
