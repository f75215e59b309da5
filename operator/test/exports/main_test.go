package exports

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

var (
	cp *substrate.ControlPlane
	// bin holds the agent built for this run.
	bin string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	bin, err = os.MkdirTemp("", "stackflow-exports-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(bin)
	if err := substrate.GoBuild(filepath.Join(bin, "agent"), "./operator/cmd/agent"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	cp, err = substrate.StartControlPlane()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cp.Stop()
	return m.Run()
}

// env is one test's world: a namespace, a Pulumi environment, local-runtime
// options.
type env struct {
	ns   string
	pe   *substrate.Pulumi
	opts operator.Options
}

func newEnv(t testing.TB) *env {
	t.Helper()
	pe := substrate.NewPulumi(t)
	return &env{ns: cp.Namespace(t), pe: pe, opts: operatortest.LocalOptions(t, pe, filepath.Join(bin, "agent"))}
}
