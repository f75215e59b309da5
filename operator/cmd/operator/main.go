// Command operator runs the Stackflow operator. Flags are parsed into
// operator.Options (flags.go); everything else lives in operator/internal.
package main

import (
	"flag"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/stackflow-io/stackflow/operator/internal/operator"
)

func main() {
	c, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		os.Exit(2) // the flag package printed the error and the usage
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&c.zap)))
	log := ctrl.Log.WithName("setup")
	if err := c.resolve(log); err != nil {
		log.Error(err, "Invalid flags")
		os.Exit(1)
	}
	opts, leaderElect := c.opts, c.leaderElect

	cfg := ctrl.GetConfigOrDie()
	ctx := ctrl.SetupSignalHandler()
	mgrOpts := ctrl.Options{
		Scheme: operator.Scheme(),
		Cache:  operator.CacheOptionsFor(opts),
		// Deprecated because a manager may live shorter than its process;
		// this one does not (see operator.EventBroadcaster).
		EventBroadcaster: operator.EventBroadcaster(), //nolint:staticcheck
		// Served by operator.AddMetricsServer and AddProbeServer instead,
		// with read and write timeouts.
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "",
		PprofBindAddress:       c.pprofAddr,
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
	if _, err := operator.AddProbeServer(mgr, c.probeAddr, op.ReadyChecks); err != nil {
		log.Error(err, "Setting up the probe server failed")
		os.Exit(1)
	}
	if _, err := operator.AddMetricsServer(mgr, c.metrics); err != nil {
		log.Error(err, "Setting up the metrics server failed")
		os.Exit(1)
	}
	if leaderElect.Enabled {
		go func() {
			<-mgr.Elected()
			log.Info("Leading", "lease", mgrOpts.LeaderElectionNamespace+"/"+leaderElect.LeaseName(), "identity", identity)
		}()
	}
	log.Info("Starting the operator", "runtime", opts.Runtime, "leaderElection", leaderElect.Enabled, "identity", identity, "artifactAddr", op.ArtifactAddr)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "The operator stopped")
		os.Exit(1)
	}
}
