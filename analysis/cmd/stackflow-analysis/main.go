// Command stackflow-analysis serves verifications of Stacks ("did Stack X
// apply commit Y?") to Argo Rollouts AnalysisTemplates and Kargo http steps.
// Flags are parsed into service.Options; everything else lives in
// analysis/service. See analysis/README.md.
//
// `stackflow-analysis refresh-token` mints a caller's token for the
// service's audience into a Secret (analysis/tokensecret), for callers that
// read their token from a Secret; analysis/config/kargo-project runs it as a
// CronJob.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/stackflow-io/stackflow/analysis/service"
	"github.com/stackflow-io/stackflow/analysis/tokensecret"
)

// version is set at build time (-ldflags "-X main.version=…").
var version = "dev"

// podNamespaceFile holds the namespace of the pod a ServiceAccount token is
// mounted in.
const podNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "refresh-token" {
		os.Exit(refreshToken(os.Args[2:]))
	}
	var opts service.Options
	zapOpts := zap.Options{Development: false}
	showVersion := flag.Bool("version", false, "print the version and exit")
	opts.BindFlags(flag.CommandLine)
	zapOpts.BindFlags(flag.CommandLine)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: stackflow-analysis [flags]\n"+
			"       stackflow-analysis refresh-token [flags]   (-h for its flags)\n\n"+
			"Serves GET /v1/namespaces/{namespace}/stacks/{name}/verification?commit=<sha>&operation=up|preview[&within=<duration>][&wait=<duration>][&notFoundAfter=<RFC 3339 time>][&denyOn=create,update,delete,replace]\n"+
			"and GET /v1/namespaces/{namespace}/stacks/{name} from an informer cache of Stacks and Updates; with\n"+
			"--pulumi-cloud-token-secret also GET /v1/pulumi/{org}/{project}/{stack}/verification. Callers send a\n"+
			"ServiceAccount token for one of --audiences. The cluster is reached through the in-cluster configuration,\n"+
			"--kubeconfig or $KUBECONFIG. See analysis/README.md.\n\n"+
			"refresh-token mints a ServiceAccount's token for the service's audience into a Secret, for callers that can\n"+
			"only read a token from a Secret (Argo Rollouts' web metrics, Kargo's http step).\n\nFlags:\n")
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

// refreshToken runs `stackflow-analysis refresh-token`: one refresh, exit 0
// on success, 1 on failure, 2 on bad flags.
func refreshToken(args []string) int {
	fs := flag.NewFlagSet("refresh-token", flag.ContinueOnError)
	var o tokensecret.Options
	o.BindFlags(fs)
	timeout := fs.Duration("timeout", time.Minute, "how long the refresh may take")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: stackflow-analysis refresh-token [flags]\n\n"+
			"Mints a token of --service-account for --audience (the TokenRequest API, as a projected token volume does),\n"+
			"bound to --secret, and writes it to that Secret's --key, with the annotations %s and\n"+
			"%s. Run it well within --expiration (analysis/config/kargo-project: a CronJob, hourly).\n"+
			"Its identity needs create on serviceaccounts/token of --service-account, and get and update on --secret.\n\nFlags:\n",
			tokensecret.AudienceAnnotation, tokensecret.ExpiresAnnotation)
		fs.PrintDefaults()
	}
	// The cluster is found as for the service: --kubeconfig, $KUBECONFIG or
	// the in-cluster configuration.
	if fs.Lookup("kubeconfig") == nil && flag.CommandLine.Lookup("kubeconfig") != nil {
		fs.Var(flag.CommandLine.Lookup("kubeconfig").Value, "kubeconfig", flag.CommandLine.Lookup("kubeconfig").Usage)
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if o.Namespace == "" {
		b, err := os.ReadFile(podNamespaceFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "error: --namespace is required outside a pod")
			return 2
		}
		o.Namespace = strings.TrimSpace(string(b))
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 2
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error: finding the cluster (in-cluster configuration, --kubeconfig or $KUBECONFIG):", err)
		return 1
	}
	if o.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	expires, err := tokensecret.Refresh(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	fmt.Printf("Secret %s/%s: a token of ServiceAccount %s for audience %s, valid until %s\n", o.Namespace, o.Secret, o.ServiceAccount, o.Audience, expires.UTC().Format(time.RFC3339))
	return 0
}
