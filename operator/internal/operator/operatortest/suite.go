package operatortest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// Suite is what the tests of a suite that runs operators share: one control
// plane, and the workspace agent built for the run.
type Suite struct {
	CP *substrate.ControlPlane
	// Agent is the agent binary (LocalOptions' agent).
	Agent string
}

// RunSuite is a suite's TestMain body: it builds the agent, logs
// controller-runtime to standard error, starts the control plane, runs the
// tests with s set, stops it all, and returns the exit code:
//
//	func TestMain(m *testing.M) { os.Exit(operatortest.RunSuite(m, &suite)) }
func RunSuite(m *testing.M, s *Suite) int {
	bin, err := os.MkdirTemp("", "stackflow-suite-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(bin)
	s.Agent = filepath.Join(bin, "agent")
	if err := substrate.GoBuild(s.Agent, "./operator/cmd/agent"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	if s.CP, err = substrate.StartControlPlane(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.CP.Stop()
	return m.Run()
}

// Env is one test's world in a Suite: a namespace, a Pulumi environment,
// and local-runtime options for an operator.
type Env struct {
	NS   string
	PE   *substrate.Pulumi
	Opts operator.Options
}

// NewEnv makes a test's Env.
func (s *Suite) NewEnv(t testing.TB) *Env {
	t.Helper()
	pe := substrate.NewPulumi(t)
	return &Env{NS: s.CP.Namespace(t), PE: pe, Opts: LocalOptions(t, pe, s.Agent)}
}
