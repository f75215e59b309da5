//go:build cluster

package clustere2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/test/framework/cluster"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// The cluster and its images, shared by the tests of this package.
var (
	testCluster *cluster.Cluster
	testImages  cluster.Images
	testClient  client.Client
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "stackflow-cluster-images-")
	if err != nil {
		logf("%v", err)
		return 1
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	testImages, err = cluster.BuildImages(ctx, substrate.RepoRoot(), dir, logf)
	if err != nil {
		logf("Building the cluster images: %v", err)
		return 1
	}
	logf("Images built in %s", time.Since(start).Round(time.Millisecond))
	testCluster, err = cluster.Start(ctx, cluster.Options{
		Images: testImages.Archives, PauseImage: testImages.Pause,
		UseServiceAccountCredentials: true, Logf: logf,
	})
	if err != nil {
		logf("Starting the cluster: %v", err)
		return 1
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(io.Discard)))
	start = time.Now()
	if _, err := substrate.InstallCRDsWith(testCluster.Config, envtest.CRDInstallOptions{Paths: []string{substrate.CRDDir()}, ErrorIfPathMissing: true}); err != nil {
		logf("Installing the CRDs: %v", err)
		testCluster.Stop()
		return 1
	}
	logf("CRDs installed in %s", time.Since(start).Round(time.Millisecond))
	if testClient, err = client.New(testCluster.Config, client.Options{Scheme: operator.Scheme()}); err != nil {
		logf("%v", err)
		testCluster.Stop()
		return 1
	}
	// The in-process operators log to a file beside the cluster's logs.
	opLog, err := os.Create(filepath.Join(testCluster.Dir, "logs", "operator.log"))
	if err != nil {
		logf("%v", err)
		testCluster.Stop()
		return 1
	}
	defer opLog.Close()
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(opLog)))
	code := m.Run()
	if helmBin != "" { // built by helmTool for the package's tests
		os.RemoveAll(filepath.Dir(helmBin))
	}
	if err := testCluster.Stop(); err != nil {
		logf("Stopping the cluster: %v", err)
		code = 1
	}
	return code
}
