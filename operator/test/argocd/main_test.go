package argocd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	argoappv1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/local"
	"github.com/stackflow-io/stackflow/operator/test/inprocess"
	"github.com/stackflow-io/stackflow/operator/test/substrate"
)

var (
	cp *substrate.ControlPlane
	// argo is Argo CD, shared by the tests (each test has its namespace and
	// Applications).
	argo *Instance
	// agentBin is the workspace agent built for this run.
	agentBin string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	build, err := Locate()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "stackflow-argocd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	agentBin = filepath.Join(dir, "agent")
	if err := substrate.GoBuild(agentBin, "./operator/cmd/agent"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	if cp, err = substrate.StartControlPlane(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cp.Stop()
	if err := build.InstallCRDs(cp.Env); err != nil {
		fmt.Fprintf(os.Stderr, "install Argo CD CRDs: %v\n", err)
		return 1
	}
	c, err := client.New(cp.Config, client.Options{Scheme: scheme()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	argo, err = Start(ctx, Options{Build: build, Env: cp.Env, Client: c, Dir: filepath.Join(dir, "argocd"), RepoRoot: substrate.RepoRoot()})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "start Argo CD: %v\n", err)
		return 1
	}
	defer argo.Stop()
	code := m.Run()
	if code != 0 {
		fmt.Fprintln(os.Stderr, argo.Logs(6000))
	}
	return code
}

// scheme adds Argo CD's types to the test client's.
func scheme() *runtime.Scheme {
	s := substrate.Scheme()
	if err := argoappv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// startOperator runs the operator in this process, with the local workspace
// runtime, for the test's namespace.
func startOperator(t *testing.T, ns string, pe *substrate.Pulumi) {
	t.Helper()
	root := t.TempDir()
	t.Cleanup(func() { local.StopAll(root) })
	opts := operator.Options{
		Runtime: operator.RuntimeLocal, LocalRoot: root, AgentBinary: agentBin,
		PulumiRoot: pe.Paths.PulumiRoot, AgentEnv: pe.EnvVars(), WorkspaceWorkers: 4, UpdateWorkers: 4, StackWorkers: 4,
		ArtifactDir: t.TempDir(), StackResyncOverride: time.Second, WatchNamespaces: []string{ns},
	}
	inprocess.StartOperator(t, cp.Config, opts)
}
