// Command stackflow-cluster (make cluster) builds the test cluster's images,
// starts a single-node cluster from real components (package
// test/framework/cluster), prints its kubeconfig and keeps it until Ctrl-C or
// SIGTERM, then tears it down.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/stackflow-io/stackflow/test/framework/cluster"
)

func main() {
	var (
		opts      cluster.Options
		imagesDir string
		root      string
	)
	// Its own flag set: package flag's also holds what dependencies register
	// in init (glog's -log_dir…), which would crowd -h.
	fs := flag.NewFlagSet("stackflow-cluster", flag.ExitOnError)
	fs.StringVar(&root, "module-root", ".", "repository root (the images are built from it)")
	fs.StringVar(&imagesDir, "images-dir", "_build/cluster-images", "where the pause and test workspace image archives are written")
	fs.StringVar(&opts.PodSubnet, "pod-subnet", "10.244.0.0/24", "the pods' bridge network")
	fs.BoolVar(&opts.UseServiceAccountCredentials, "use-service-account-credentials", false, "run each controller of kube-controller-manager with its own service account")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: stackflow-cluster [flags]   (make cluster CLUSTER_ARGS="…"; needs root)

Builds the test cluster's images, starts a single-node Kubernetes cluster
from real components (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kubelet with containerd, kube-proxy, kube-network-policies),
prints its kubeconfig and keeps it until Ctrl-C or SIGTERM, then tears it
down.

Flags:
`)
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:]) // ExitOnError: -h and bad flags exit
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	opts.Logf = logf
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts, root, imagesDir); err != nil {
		fmt.Fprintln(os.Stderr, "stackflow-cluster:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, opts cluster.Options, root, imagesDir string) error {
	start := time.Now()
	imgs, err := cluster.BuildImages(ctx, root, imagesDir, opts.Logf)
	if err != nil {
		return err
	}
	opts.Logf("Images built in %s: %s, %s, %s", time.Since(start).Round(time.Millisecond), imgs.Pause, imgs.Workspace, imgs.Operator)
	opts.Images, opts.PauseImage = imgs.Archives, imgs.Pause
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		return err
	}
	kc, _ := filepath.Abs(c.Kubeconfig)
	fmt.Printf("Cluster ready. export KUBECONFIG=%s\nPods reach the host at %s; workspace image %s, operator image %s. Ctrl-C stops it.\n", kc, c.GatewayIP, imgs.Workspace, imgs.Operator)
	<-ctx.Done()
	return c.Stop()
}
