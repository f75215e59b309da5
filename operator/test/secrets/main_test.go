package secrets

import (
	"fmt"
	"github.com/stackflow-io/stackflow/test/framework/logbuf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

var (
	cp *substrate.ControlPlane
	// agentBin is the agent built for this run.
	agentBin string
	// operatorLog receives everything the in-process operator logs.
	operatorLog logbuf.Buffer
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "stackflow-secrets-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	agentBin = filepath.Join(dir, "agent")
	build := exec.Command("go", "build", "-o", agentBin, "./operator/cmd/agent")
	build.Dir = substrate.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build agent: %v\n%s", err, out)
		return 1
	}
	// The operator's log is searched, not shown: a failing test prints it.
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(&operatorLog)))
	if cp, err = substrate.StartControlPlane(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cp.Stop()
	return m.Run()
}
