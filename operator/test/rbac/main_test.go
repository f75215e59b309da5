package rbac

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
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
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{substrate.CRDDir()},
		ErrorIfCRDPathMissing: true,
	}
	env.ControlPlane.GetAPIServer().Configure().Append("enable-admission-plugins", "OwnerReferencesPermissionEnforcement")
	return substrate.StartControlPlaneEnv(env)
}
