// Command stackflow-dev runs Stackflow locally on embedded defaults (`make
// run`); see package devenv.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/stackflow-io/stackflow/operator/devtools/devenv"
)

func main() {
	// A flag set of its own: the one of package flag also holds what
	// dependencies register in init (glog's -log_dir…, controller-runtime's
	// -kubeconfig), which mean nothing here and would crowd -h.
	fs := flag.NewFlagSet("stackflow-dev", flag.ExitOnError)
	var opts devenv.Options
	noSample := fs.Bool("no-sample", false, "do not create the sample repository and Stack")
	fs.StringVar(&opts.Dir, "dir", ".run", "directory for the run's state (wiped at start)")
	fs.DurationVar(&opts.UntilReady, "until-ready", 0, "exit once the sample Stack is Ready, failing after this long (0: run until Ctrl-C)")
	verbose := fs.Bool("verbose", false, "log the operator's reconciles")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: stackflow-dev [flags]   (make run RUN_ARGS="…")

Starts a local control plane (kube-apiserver and etcd), the Stackflow
operator with the local workspace runtime, a file:// Pulumi backend, and a
sample Stack tracking a git repository it creates and serves on loopback;
prints what it does and a kubeconfig for kubectl. Ctrl-C stops everything.

Flags:
`)
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:]) // ExitOnError: -h and bad flags exit
	opts.Sample = !*noSample
	opts.Out = os.Stdout
	level := zapcore.ErrorLevel
	if *verbose {
		level = zapcore.InfoLevel
	}
	ctrl.SetLogger(zap.New(zap.Level(level)))

	// SIGINT (Ctrl-C) and SIGTERM (make run's process killed, a supervisor
	// stopping it) both stop the control plane and the agents before exiting;
	// so does the death of the parent process (stopWithParent).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopWithParent()
	if err := devenv.Run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "stackflow-dev:", err)
		os.Exit(1)
	}
}
