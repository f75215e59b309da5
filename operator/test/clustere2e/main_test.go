//go:build cluster

package clustere2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stackflow-io/stackflow/operator/test/cluster"
)

// The cluster and its images, shared by the tests of this package.
var (
	testCluster *cluster.Cluster
	testImages  cluster.Images
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

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
	testImages, err = cluster.BuildImages(ctx, repoRoot(), dir, logf)
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
	code := m.Run()
	if err := testCluster.Stop(); err != nil {
		logf("Stopping the cluster: %v", err)
		code = 1
	}
	return code
}
