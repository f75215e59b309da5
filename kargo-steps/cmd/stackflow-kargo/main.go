// Command stackflow-kargo promotes Stacks in a Kargo pipeline: it sets a
// Stack's spec.commit in a manifests checkout, waits until the operator has
// applied it, and lints a manifests repository for Kargo's open-source
// steps. It is also the image of an Akuity Platform CustomPromotionStep.
// Everything lives in kargo-steps/cli; see kargo-steps/README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/stackflow-io/stackflow/kargo-steps/cli"
)

var version = "dev"

func main() {
	cli.Version = version
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
