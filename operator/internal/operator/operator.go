// Package operator assembles the Stackflow operator: the scheme, the workspace
// runtime chosen by the options, the agent client pool and the reconcilers, on a
// controller-runtime manager.
//
// It imports everything under operator/internal; nothing imports it but
// cmd/operator and tests.
package operator

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	pulumiv1alpha1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/agentclient"
	"github.com/stackflow-io/stackflow/operator/internal/controller"
	"github.com/stackflow-io/stackflow/operator/internal/workspace"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/local"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
)

// Runtime names.
const (
	RuntimePod   = "pod"
	RuntimeLocal = "local"
)

// Options configure the operator.
type Options struct {
	// Runtime is "pod" (the default) or "local".
	Runtime string
	// Pod configures the pod runtime.
	Pod pod.Options
	// LocalRoot, AgentBinary, PulumiRoot and AgentEnv configure the local
	// runtime.
	LocalRoot   string
	AgentBinary string
	PulumiRoot  string
	AgentEnv    map[string]string
	// LocalRestartBackoff is how long a failed local agent stays down before
	// it is started again (default 30s).
	LocalRestartBackoff time.Duration
	// WorkspaceWorkers, UpdateWorkers and StackWorkers are the controllers'
	// concurrency.
	WorkspaceWorkers int
	UpdateWorkers    int
	StackWorkers     int
	// StackResyncOverride replaces every Stack's resync interval (tests and
	// local demos; the CRD's minimum is 60 s).
	StackResyncOverride time.Duration
}

// Scheme has the Kubernetes and Stackflow types.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, pulumiv1.AddToScheme, pulumiv1alpha1.AddToScheme, autov1alpha1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// Setup registers the reconcilers on mgr. The returned pool is closed by the
// caller when the manager stops.
func Setup(mgr ctrl.Manager, opts Options) (*agentclient.Pool, error) {
	var rt workspace.Runtime
	switch opts.Runtime {
	case RuntimePod, "":
		rt = &workspace.PodRuntime{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Options: opts.Pod}
	case RuntimeLocal:
		if opts.AgentBinary == "" || opts.LocalRoot == "" {
			return nil, fmt.Errorf("the local runtime needs an agent binary and a root directory")
		}
		rt = &local.Runtime{Root: opts.LocalRoot, AgentBinary: opts.AgentBinary, PulumiRoot: opts.PulumiRoot,
			Env: opts.AgentEnv, Client: mgr.GetAPIReader(), RestartBackoff: opts.LocalRestartBackoff}
	default:
		return nil, fmt.Errorf("unknown workspace runtime %q: use pod or local", opts.Runtime)
	}
	pool := agentclient.NewPool()
	if err := (&controller.WorkspaceReconciler{
		Client: mgr.GetClient(), Recorder: mgr.GetEventRecorderFor("workspace-controller"),
		Runtime: rt, Agents: pool, Workers: opts.WorkspaceWorkers,
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up workspace controller: %w", err)
	}
	if err := (&controller.StackReconciler{
		Client: mgr.GetClient(), Recorder: mgr.GetEventRecorderFor("stack-controller"), Workers: opts.StackWorkers,
		ResyncOverride: opts.StackResyncOverride,
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up stack controller: %w", err)
	}
	if err := (&controller.UpdateReconciler{
		Client: mgr.GetClient(), Recorder: mgr.GetEventRecorderFor("update-controller"),
		Agents: pool, Workers: opts.UpdateWorkers,
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up update controller: %w", err)
	}
	return pool, nil
}
