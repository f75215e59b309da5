// Command stackflow-demo runs `make demo`: a staged rollout dev → test → prod
// on this machine with the real operator, analysis service and Argo CD; see
// package demo.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap/zapcore"
	"golang.org/x/term"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/stackflow-io/stackflow/operator/devtools/demo"
	"github.com/stackflow-io/stackflow/test/framework/argocd"
)

func main() {
	// A flag set of its own: the one of package flag also holds what
	// dependencies register in init (glog's -log_dir…, controller-runtime's
	// -kubeconfig), which mean nothing here and would crowd -h.
	fs := flag.NewFlagSet("stackflow-demo", flag.ExitOnError)
	var o demo.Options
	fs.StringVar(&o.Dir, "dir", ".demo", "directory for the run's state: kubeconfig, repositories, backend, Argo CD logs (wiped at start)")
	fs.StringVar(&o.Examples, "examples", "", "the Argo CD layout to roll out (appproject.yaml, applications/<stage>.yaml, environments/<stage>/); default: the repository's examples/argocd")
	fs.BoolVar(&o.Yes, "yes", false, "promote to prod without asking for approval")
	argoVersion := fs.String("argocd-version", string(argocd.V3), "the Argo CD to run: 3 (the newest v3 the substrate builds) or 2.14")
	exit := fs.Bool("exit", false, "exit after the summary instead of keeping the control plane running for kubectl")
	plain := fs.Bool("plain", false, "print the table whenever it changes instead of redrawing it in place")
	verbose := fs.Bool("verbose", false, "log the operator's and the analysis service's work")
	summaryJSON := fs.String("summary-json", "", "also write the run's summary (the final table, the releases, which Argo CD and Kargo ran) as JSON to this file when it is printed (before the demo keeps running for kubectl), for scripts")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: stackflow-demo [flags]

Starts a local control plane, the Stackflow operator, the analysis service and
Argo CD (v3 by default; --argocd-version 2.14 runs v2.14); creates a program repository and a manifests repository laid out as
examples/argocd; rolls release 2 out dev → test → prod with Kargo's promotion
steps (asking before prod), then shows a broken release 3 stopped at dev.

Flags:
`)
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:]) // ExitOnError: -h and bad flags exit
	v, err := argocd.ParseVersion(*argoVersion)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stackflow-demo:", err)
		os.Exit(2)
	}
	o.ArgoCDVersion = v
	o.Out = os.Stdout
	o.Live = !*plain && term.IsTerminal(int(os.Stdout.Fd()))
	o.Stay = !*exit
	level := zapcore.ErrorLevel + 1
	if *verbose {
		level = zapcore.InfoLevel
	}
	ctrl.SetLogger(zap.New(zap.Level(level)))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *summaryJSON != "" {
		// Written when the summary is printed, not at exit: with the
		// default (no --exit) the demo keeps running after it.
		o.OnSummary = func(sum *demo.Summary) error {
			b, err := json.MarshalIndent(sum, "", "  ")
			if err != nil {
				return err
			}
			if err := os.WriteFile(*summaryJSON, append(b, '\n'), 0o644); err != nil {
				return fmt.Errorf("write the summary: %w", err)
			}
			return nil
		}
	}
	if _, err := demo.Run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "stackflow-demo:", err)
		os.Exit(1)
	}
}
