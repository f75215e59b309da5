package rbac

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/stackflow-io/stackflow/operator/test/substrate"
)

// The control plane and the agent binary are made on first use, so the
// justification test runs without them.
var (
	setupOnce sync.Once
	setupErr  error
	cp        *substrate.ControlPlane
	bin       string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cp != nil {
		_ = cp.Stop()
	}
	if bin != "" {
		os.RemoveAll(bin)
	}
	os.Exit(code)
}

// controlPlane starts the shared control plane and builds the agent.
func controlPlane(t testing.TB) *substrate.ControlPlane {
	t.Helper()
	setupOnce.Do(func() {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
		if bin, setupErr = os.MkdirTemp("", "stackflow-rbac-bin-"); setupErr != nil {
			return
		}
		build := exec.Command("go", "build", "-o", filepath.Join(bin, "agent"), "./operator/cmd/agent")
		build.Dir = substrate.RepoRoot()
		if out, err := build.CombinedOutput(); err != nil {
			setupErr = fmt.Errorf("build the agent: %v\n%s", err, out)
			return
		}
		cp, setupErr = startControlPlane()
	})
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return cp
}

// startControlPlane is substrate.StartControlPlane with the admission plugin
// OwnerReferencesPermissionEnforcement on (as OpenShift and hardened clusters
// run it): creating an object with a blockOwnerDeletion owner reference then
// needs update on the owner's finalizers subresource, so the role's
// */finalizers verbs are tested, not only stated.
func startControlPlane() (*substrate.ControlPlane, error) {
	p, err := substrate.Locate()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: p.KubeAssets,
		CRDDirectoryPaths:     []string{substrate.CRDDir()},
		ErrorIfCRDPathMissing: true,
		Scheme:                substrate.Scheme(),
	}
	env.ControlPlane.GetAPIServer().Configure().Append("enable-admission-plugins", "OwnerReferencesPermissionEnforcement")
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start control plane from %s (build it with `make substrate`): %w", p.KubeAssets, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &substrate.ControlPlane{Env: env, Config: cfg, Client: c}, nil
}
