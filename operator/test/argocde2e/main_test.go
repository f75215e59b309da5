package argocde2e

import (
	"context"
	"fmt"
	"maps"
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
	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/local"
	"github.com/stackflow-io/stackflow/test/framework/argocd"
	"github.com/stackflow-io/stackflow/test/framework/provider"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// agentBin is the workspace agent built for this run.
var agentBin string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
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
	return m.Run()
}

// argoEnv is one version of Argo CD running against a control plane of its
// own (each version installs its own CRDs).
type argoEnv struct {
	build argocd.Build
	cp    *substrate.ControlPlane
	c     client.Client
	argo  *argocd.Instance
}

// startArgo starts a control plane and Argo CD version v on it for one test,
// both stopped at its cleanup; a failing test gets the components' logs.
// configure, when given, sets Argo CD's options further.
func startArgo(t *testing.T, v argocd.Version, configure ...func(*argocd.Options)) *argoEnv {
	t.Helper()
	build := argocd.LocateOrSkip(t, v)
	cp := substrate.StartControlPlaneT(t)
	if err := build.InstallCRDs(cp.Env); err != nil {
		t.Fatalf("install Argo CD %s CRDs: %v", build.Version, err)
	}
	c, err := client.New(cp.Config, client.Options{Scheme: scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	opts := argocd.Options{Build: build, Env: cp.Env, Client: c, Dir: filepath.Join(t.TempDir(), "argocd"), RepoRoot: substrate.RepoRoot()}
	for _, f := range configure {
		f(&opts)
	}
	argo, err := argocd.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start Argo CD %s: %v", build.Version, err)
	}
	t.Logf("Argo CD %s started in %s", build.Version, time.Since(start).Round(100*time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(argo.Logs(6000))
		}
		argo.Stop()
	})
	return &argoEnv{build: build, cp: cp, c: c, argo: argo}
}

// approvalNamespace is a new namespace of e's control plane with the plan
// approval admission policy installed and the operator started for it, and
// the Pulumi engine the operator runs. agentEnv is added to the agents'
// environment.
func (e *argoEnv) approvalNamespace(t *testing.T, agentEnv ...map[string]string) (string, *substrate.Pulumi) {
	t.Helper()
	ns := e.cp.Namespace(t)
	if err := substrate.InstallPlanApprovalPolicy(context.Background(), e.cp.Config, e.c, ns); err != nil {
		t.Fatal(err)
	}
	pe := substrate.NewPulumi(t)
	startOperator(t, e.cp, ns, pe, agentEnv...)
	return ns, pe
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
func startOperator(t *testing.T, cp *substrate.ControlPlane, ns string, pe *substrate.Pulumi, agentEnv ...map[string]string) {
	t.Helper()
	env := pe.EnvVars()
	for _, m := range agentEnv {
		maps.Copy(env, m)
	}
	root := t.TempDir()
	t.Cleanup(func() { local.StopAll(root) })
	opts := operator.Options{
		Runtime: operator.RuntimeLocal, LocalRoot: root, AgentBinary: agentBin,
		PulumiRoot: pe.Paths.PulumiRoot, AgentEnv: env, WorkspaceWorkers: 4, UpdateWorkers: 4, StackWorkers: 4,
		ArtifactDir: t.TempDir(), StackResyncOverride: time.Second, WatchNamespaces: []string{ns},
	}
	operatortest.StartOperator(t, cp.Config, opts)
}

// updateHold is the test provider's hold file (provider.HoldEnv): while it
// exists, the agents' record creations, updates and refreshes wait, so a
// test sees an update running however slow the machine, and lets it end
// once it has.
type updateHold string

// newUpdateHold is a hold, released when the test ends.
func newUpdateHold(t *testing.T) updateHold {
	h := updateHold(filepath.Join(t.TempDir(), "hold"))
	t.Cleanup(func() { h.release(t) })
	return h
}

// agentEnv is the agents' environment naming the hold.
func (h updateHold) agentEnv() map[string]string {
	return map[string]string{provider.HoldEnv: string(h)}
}

// hold makes updates wait from now on.
func (h updateHold) hold(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(string(h), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// release lets held updates go on (a no-op when not held).
func (h updateHold) release(t *testing.T) {
	t.Helper()
	if err := os.Remove(string(h)); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}
