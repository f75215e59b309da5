// Command stackflow-analysis serves verifications of Stacks ("did Stack X
// apply commit Y?") to Argo Rollouts AnalysisTemplates and Kargo http steps.
// Flags are parsed into service.Options; everything else lives in
// analysis/service. See analysis/README.md.
package main

import (
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/stackflow-io/stackflow/analysis/service"
)

// version is set at build time (-ldflags "-X main.version=…").
var version = "dev"

func main() {
	var opts service.Options
	zapOpts := zap.Options{Development: false}
	showVersion := flag.Bool("version", false, "print the version and exit")
	opts.BindFlags(flag.CommandLine)
	zapOpts.BindFlags(flag.CommandLine)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: stackflow-analysis [flags]\n\n"+
			"Serves GET /v1/namespaces/{namespace}/stacks/{name}/verification?commit=<sha>&operation=up|preview[&within=<duration>][&wait=<duration>]\n"+
			"and GET /v1/namespaces/{namespace}/stacks/{name} from an informer cache of Stacks and Updates; with\n"+
			"--pulumi-cloud-token-secret also GET /v1/pulumi/{org}/{project}/{stack}/verification. The cluster is reached\n"+
			"through the in-cluster configuration, --kubeconfig or $KUBECONFIG. See analysis/README.md.\n\nFlags:\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *showVersion {
		fmt.Println("stackflow-analysis", version)
		return
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("analysis")
	if err := opts.Validate(); err != nil {
		log.Error(err, "Invalid flags")
		os.Exit(2)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "Finding the cluster failed (in-cluster configuration, --kubeconfig or $KUBECONFIG)")
		os.Exit(1)
	}
	opts.Config, opts.Log = cfg, log
	if err := service.Run(ctrl.SetupSignalHandler(), opts); err != nil {
		log.Error(err, "The analysis service stopped")
		os.Exit(1)
	}
}
