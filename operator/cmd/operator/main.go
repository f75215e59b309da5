// Command operator runs the Stackflow operator. Flags are parsed into
// operator.Options; everything else lives in operator/internal.
package main

import (
	"flag"
	"os"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/stackflow-io/stackflow/operator/internal/operator"
)

func main() {
	var (
		opts        operator.Options
		metricsAddr string
		probeAddr   string
		leaderElect operator.LeaderElection
		agentEnv    string
		zapOpts     = zap.Options{Development: false}

		webhookSecretFile string
		watchNamespaces   string
	)
	flag.StringVar(&opts.Runtime, "workspace-runtime", operator.RuntimePod, `how workspaces run: "pod" (StatefulSets; for clusters) or "local" (agent child processes; for development)`)
	flag.StringVar(&opts.Pod.AgentImage, "agent-image", "ghcr.io/stackflow-io/stackflow-operator:latest", "image holding the agent at /agent (pod runtime)")
	flag.StringVar(&opts.Pod.DefaultPulumiImage, "pulumi-image", "pulumi/pulumi:3.274.1-nonroot", "workspace image when spec.image is empty (pod runtime)")
	flag.StringVar(&opts.LocalRoot, "local-root", "", "directory holding the local runtime's workspaces")
	flag.StringVar(&opts.AgentBinary, "agent-binary", "", "agent executable for the local runtime")
	flag.StringVar(&opts.PulumiRoot, "pulumi-root", "", "directory holding bin/pulumi for local agents (default: pulumi from PATH)")
	flag.DurationVar(&opts.LocalRestartBackoff, "local-restart-backoff", 30*time.Second, "how long a failed local agent stays down before it is restarted")
	flag.StringVar(&agentEnv, "agent-env", "", "comma-separated KEY=VALUE environment for local agents")
	flag.IntVar(&opts.WorkspaceWorkers, "workspace-workers", 4, "concurrent Workspace reconciles")
	flag.DurationVar(&opts.StackResyncOverride, "stack-resync-override", 0, "replace every Stack's resync interval (for tests and local demos; the API's minimum is 60s)")
	flag.IntVar(&opts.StackWorkers, "stack-workers", 4, "concurrent Stack reconciles")
	flag.IntVar(&opts.UpdateWorkers, "update-workers", 4, "concurrent Update reconciles (operations in flight are not limited by it)")
	flag.StringVar(&opts.ArtifactDir, "artifact-dir", "", "directory holding Program artifacts (default: a new temporary directory; need not persist)")
	flag.StringVar(&opts.ArtifactAddr, "artifact-addr", ":9090", "listen address of the artifact server workspaces download Programs from")
	flag.StringVar(&opts.ArtifactBaseURL, "artifact-base-url", "", "URL workspaces reach the artifact server at, e.g. http://stackflow-operator.stackflow-system.svc:9090 (default: http://127.0.0.1:<port of --artifact-addr>)")
	flag.DurationVar(&opts.GitPollInterval, "git-poll-interval", time.Minute, "how long a branch listing serves every Stack of a repository (relax to 5-10m with the push webhook)")
	flag.StringVar(&opts.WebhookAddr, "webhook-bind-address", "", "serve the GitHub push webhook at /webhooks/github on this address (empty: off)")
	flag.StringVar(&webhookSecretFile, "webhook-secret-file", "", "file holding the webhook secret (required with --webhook-bind-address)")
	flag.StringVar(&opts.OperatorNamespace, "operator-namespace", envOr("POD_NAMESPACE", "default"), "namespace of the operator's own objects: the Secret "+operator.InputsDigestKeySecret+" keying the digests of Stack inputs (created when missing)")
	flag.StringVar(&watchNamespaces, "watch-namespaces", "", "comma-separated namespaces to watch (default: all); limits caches, RBAC needs and reconciles")
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "address serving Prometheus metrics at /metrics, on every replica (0 disables)")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "health probe address: /healthz (the process answers) and /readyz (this replica, leader or not, serves artifacts: artifact server up, Program cache synced); 0 disables")
	flag.BoolVar(&leaderElect.Enabled, "leader-elect", false, "elect a leader through the Lease "+operator.LeaderElectionID+", for more than one replica (only the leader reconciles; every replica serves artifacts and probes)")
	flag.StringVar(&leaderElect.Namespace, "leader-elect-namespace", "", "namespace of the leader election Lease (default in a cluster: the pod's namespace; required outside one)")
	flag.StringVar(&leaderElect.Identity, "leader-elect-identity", "", "this replica's name in the Lease's holderIdentity (default: <hostname>_<random UUID>; e.g. the pod name from the downward API)")
	flag.DurationVar(&leaderElect.LeaseDuration, "leader-elect-lease-duration", operator.DefaultLeaseDuration, "how long followers wait after the leader's last renewal before taking over (a crashed leader; a clean shutdown hands over at once)")
	flag.DurationVar(&leaderElect.RenewDeadline, "leader-elect-renew-deadline", operator.DefaultRenewDeadline, "how long the leader retries renewing the Lease before it stops leading and exits (less than the lease duration)")
	flag.DurationVar(&leaderElect.RetryPeriod, "leader-elect-retry-period", operator.DefaultRetryPeriod, "interval between attempts to acquire or renew the Lease")
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	if leaderElect.Enabled {
		if err := leaderElect.Validate(); err != nil { // before looking for a cluster
			log.Error(err, "Invalid leader election flags")
			os.Exit(1)
		}
	}
	opts.AgentEnv = map[string]string{}
	for _, kv := range strings.Split(agentEnv, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			opts.AgentEnv[k] = v
		}
	}
	if webhookSecretFile != "" {
		b, err := os.ReadFile(webhookSecretFile)
		if err != nil {
			log.Error(err, "Reading the webhook secret failed")
			os.Exit(1)
		}
		opts.WebhookSecret = strings.TrimSpace(string(b))
	}
	var namespaces []string
	for _, ns := range strings.Split(watchNamespaces, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			namespaces = append(namespaces, ns)
		}
	}
	cfg := ctrl.GetConfigOrDie()
	mgrOpts := ctrl.Options{
		Scheme: operator.Scheme(),
		Cache:  operator.CacheOptions(namespaces),
		// Served by operator.AddMetricsServer and AddProbeServer instead,
		// with read and write timeouts.
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "",
	}
	identity, err := leaderElect.Apply(cfg, &mgrOpts)
	if err != nil {
		log.Error(err, "Configuring leader election failed")
		os.Exit(1)
	}
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	if err != nil {
		log.Error(err, "Creating the manager failed")
		os.Exit(1)
	}
	op, err := operator.Setup(mgr, opts)
	if err != nil {
		log.Error(err, "Setting up the operator failed")
		os.Exit(1)
	}
	defer op.Close()
	// Liveness: the process answers. Readiness (every replica, leader or
	// not): Setup's checks, the artifact server accepting and the Program
	// cache synced.
	if _, err := operator.AddProbeServer(mgr, probeAddr, op.ReadyChecks); err != nil {
		log.Error(err, "Setting up the probe server failed")
		os.Exit(1)
	}
	if _, err := operator.AddMetricsServer(mgr, metricsAddr); err != nil {
		log.Error(err, "Setting up the metrics server failed")
		os.Exit(1)
	}
	if leaderElect.Enabled {
		go func() {
			<-mgr.Elected()
			log.Info("Leading", "lease", mgrOpts.LeaderElectionNamespace+"/"+operator.LeaderElectionID, "identity", identity)
		}()
	}
	log.Info("Starting the operator", "runtime", opts.Runtime, "leaderElection", leaderElect.Enabled, "identity", identity, "artifactAddr", op.ArtifactAddr)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "The operator stopped")
		os.Exit(1)
	}
}

// envOr is the variable's value, or def when it is unset.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
