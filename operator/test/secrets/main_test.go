package secrets

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
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
	operatorLog syncBuffer
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

// syncBuffer is a bytes.Buffer safe for the operator's concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
