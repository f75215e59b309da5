package config

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// The control plane shared by the tests that need one: the built
// kube-apiserver and etcd with the Stackflow CRDs and Argo Rollouts v1.10.1's
// CRDs (hack/substrate.sh puts them beside rollouts-controller).
var (
	env         *envtest.Environment
	k8s         client.Client
	rolloutsDir string
)

func scheme() *runtime.Scheme {
	s := substrate.Scheme()
	if err := rolloutsv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// The analysis service's informers log through controller-runtime's
	// logger: errors only, instead of its "SetLogger was never called" trace.
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel), zap.WriteTo(os.Stderr)))
	paths, err := substrate.Locate()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rolloutsDir = paths.Rollouts
	cp, err := substrate.StartControlPlaneEnv(&envtest.Environment{
		CRDDirectoryPaths:     []string{substrate.CRDDir(), filepath.Join(rolloutsDir, "crds")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = cp.Stop() }()
	env, k8s = cp.Env, cp.Client
	return m.Run()
}
