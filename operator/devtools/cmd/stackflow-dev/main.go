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
	var opts devenv.Options
	noSample := flag.Bool("no-sample", false, "do not create the sample repository and Stack")
	flag.StringVar(&opts.Dir, "dir", ".run", "directory for the run's state (wiped at start)")
	flag.DurationVar(&opts.UntilReady, "until-ready", 0, "exit once the sample Stack is Ready, failing after this long (0: run until Ctrl-C)")
	verbose := flag.Bool("verbose", false, "log the operator's reconciles")
	flag.Parse()
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
