package substrate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	pulumiv1alpha1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1alpha1"
	stackflowv1alpha1 "github.com/stackflow-io/stackflow/operator/api/stackflow/v1alpha1"
)

// CRDDir is where the generated CRDs live.
func CRDDir() string { return filepath.Join(RepoRoot(), "operator", "config", "crd", "bases") }

// Scheme returns a scheme with the Kubernetes and Stackflow types.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme,
		pulumiv1.AddToScheme, pulumiv1alpha1.AddToScheme, autov1alpha1.AddToScheme, stackflowv1alpha1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// ControlPlane is a running kube-apiserver + etcd with the CRDs installed.
type ControlPlane struct {
	Env    *envtest.Environment
	Config *rest.Config
	Client client.Client

	guard *guard
}

// StartControlPlane starts a control plane. Call Stop when done (TestMain) or use
// StartControlPlaneT.
func StartControlPlane() (*ControlPlane, error) {
	return StartControlPlaneEnv(&envtest.Environment{
		CRDDirectoryPaths:     []string{CRDDir()},
		ErrorIfCRDPathMissing: true,
		Scheme:                Scheme(),
	})
}

var startMu sync.Mutex

// StartControlPlaneEnv starts env (its binaries, when not set, are the
// substrate's) as a ControlPlane. Its etcd and kube-apiserver are killed when
// this process dies, however it ends (guard), so that no test package leaves
// them running.
func StartControlPlaneEnv(env *envtest.Environment) (*ControlPlane, error) {
	if env.BinaryAssetsDirectory == "" {
		p, err := Locate()
		if err != nil {
			return nil, err
		}
		env.BinaryAssetsDirectory = p.KubeAssets
	}
	if env.Scheme == nil {
		env.Scheme = Scheme()
	}
	if env.ControlPlaneStartTimeout == 0 && os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") == "" {
		// envtest's default, 20 s a component, is too short for a kube-apiserver
		// starting on 2 busy cores (seen: every one of its 5 tries timed out
		// while other builds ran); a process that fails still fails at once.
		env.ControlPlaneStartTimeout = 2 * time.Minute
	}
	if env.CRDInstallOptions.MaxTime == 0 {
		// envtest waits 10 s for the CRDs to be served; with the whole suite
		// on 2 cores that was too short once (analysis/config in CI: "waiting
		// for CRDs to appear as API resources: context deadline exceeded").
		env.CRDInstallOptions.MaxTime = 2 * time.Minute
	}
	// One start at a time, so that the processes found new are this one's.
	startMu.Lock()
	defer startMu.Unlock()
	var cfg *rest.Config
	binaries := []string{filepath.Join(env.BinaryAssetsDirectory, "etcd"), filepath.Join(env.BinaryAssetsDirectory, "kube-apiserver")}
	pids, err := newChildren(binaries, func() (err error) {
		cfg, err = env.Start()
		return err
	})
	if cfg == nil {
		_ = env.Stop()
		return nil, fmt.Errorf("start control plane from %s (build it with `make substrate`): %w", env.BinaryAssetsDirectory, err)
	}
	cp := &ControlPlane{Env: env, Config: cfg}
	if err == nil {
		cp.guard, err = startGuard(pids)
	}
	if err == nil {
		cp.Client, err = client.New(cfg, client.Options{Scheme: env.Scheme})
	}
	if err != nil {
		_ = cp.Stop()
		return nil, err
	}
	return cp, nil
}

// Stop stops the control plane.
func (cp *ControlPlane) Stop() error {
	cp.guard.stop()
	return cp.Env.Stop()
}

// StartControlPlaneT starts a control plane for one test and stops it at cleanup.
func StartControlPlaneT(t testing.TB) *ControlPlane {
	t.Helper()
	MustLocate(t)
	cp, err := StartControlPlane()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Logf("stop control plane: %v", err)
		}
	})
	return cp
}

// Namespace creates a namespace with a generated name for one test.
func (cp *ControlPlane) Namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	if err := cp.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		cp.clearStackflowObjects(ns.Name)
		_ = cp.Client.Delete(context.Background(), ns)
	})
	return ns.Name
}

// clearStackflowObjects deletes the Stacks, Programs, Workspaces and Updates
// a test left in namespace, finalizers removed (its operator has stopped by
// then: cleanups run last-registered first). envtest runs no namespace
// controller, so they would otherwise outlive the test, in a namespace that
// is terminating, and every later test's operator would reconcile them.
func (cp *ControlPlane) clearStackflowObjects(namespace string) {
	ctx := context.Background()
	lists := []client.ObjectList{&pulumiv1.StackList{}, &pulumiv1.ProgramList{}, &autov1alpha1.WorkspaceList{}, &autov1alpha1.UpdateList{}}
	for _, list := range lists {
		if err := cp.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
			continue // e.g. a control plane without these CRDs
		}
		_ = meta.EachListItem(list, func(o runtime.Object) error {
			obj := o.(client.Object)
			if len(obj.GetFinalizers()) > 0 {
				patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
				obj.SetFinalizers(nil)
				_ = cp.Client.Patch(ctx, obj, patch)
			}
			_ = cp.Client.Delete(ctx, obj)
			return nil
		})
	}
}

// WriteKubeconfig adds a system:masters user to the control plane and writes
// its kubeconfig to path (for kubectl, or a process run against it).
func WriteKubeconfig(env *envtest.Environment, path string) (string, error) {
	user, err := env.AddUser(envtest.User{Name: "stackflow", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	b, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	return path, os.WriteFile(path, b, 0o600)
}

// InstallCRDs installs the CRDs of the YAML files in dir (a host tool's:
// Argo CD's, Argo Rollouts', Kargo's) and waits until the API server serves
// them, for up to 2 minutes: envtest's default of 10 s is too short for a
// dozen large CRDs on 2 busy cores (seen: Argo CD's timed out while other
// builds ran).
func InstallCRDs(env *envtest.Environment, dir string) error {
	_, err := InstallCRDsWith(env.Config, envtest.CRDInstallOptions{Paths: []string{dir}, ErrorIfPathMissing: true})
	return err
}

// InstallCRDsWith is envtest.InstallCRDs waiting up to 2 minutes (when
// opts says no other bound) for the API server to serve the CRDs: the one
// way every test installs CRDs (seen in CI: a 10 s wait for Stackflow's own
// CRDs timed out in the cluster tests while the suite ran beside them).
func InstallCRDsWith(cfg *rest.Config, opts envtest.CRDInstallOptions) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	if opts.MaxTime == 0 {
		opts.MaxTime = 2 * time.Minute
	}
	return envtest.InstallCRDs(cfg, opts)
}
