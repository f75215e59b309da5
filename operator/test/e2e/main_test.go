package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
	"github.com/stackflow-io/stackflow/test/framework/hostile"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

var (
	cp *substrate.ControlPlane
	// bin holds the agent and operator binaries built for this run.
	bin string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	bin, err = os.MkdirTemp("", "stackflow-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(bin)
	for _, target := range []string{"agent", "operator"} {
		build := exec.Command("go", "build", "-o", filepath.Join(bin, target), "./operator/cmd/"+target)
		build.Dir = substrate.RepoRoot()
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", target, err, out)
			return 1
		}
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	// The hostile HTTPS git servers' CA (TestHostileGitServersHoldNoOtherStack),
	// trusted before anything in this process loads the system roots.
	if err := os.Setenv("SSL_CERT_FILE", hostile.CAFile(&testing.T{})); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
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

// startOperator runs the operator in this process until the returned stop is
// called (or the test ends).
func startOperator(t testing.TB, opts operator.Options) (stop func()) {
	t.Helper()
	_, stop = startOperatorWith(t, opts)
	return stop
}

// startOperatorWith is startOperator returning what Setup assembled.
func startOperatorWith(t testing.TB, opts operator.Options) (op *operator.Operator, stop func()) {
	t.Helper()
	return operatortest.StartOperator(t, cp.Config, opts)
}

// eventually polls cond until it returns true or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	substrate.Eventually(t, timeout, what, cond)
}

func get(t testing.TB, obj client.Object) error {
	t.Helper()
	return cp.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
}

// ctrlConfigUniqueNames lets several operators (one per test, or a restarted
// one) run in this process: controller names are unique per manager only.
func ctrlConfigUniqueNames() config.Controller {
	skip := true
	return config.Controller{SkipNameValidation: &skip}
}
