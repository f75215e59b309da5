// Command stackflow-preview is the GitHub Action's binary (see
// github-action/action.yml): it reads the action's inputs from INPUT_<NAME>
// and the runner's variables, previews, and reports. Everything lives in
// github-action/action; see github-action/README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/stackflow-io/stackflow/github-action/action"
	"github.com/stackflow-io/stackflow/github-action/inputs"
	"github.com/stackflow-io/stackflow/github-action/workflow"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "stackflow-preview takes no arguments: it is configured by the action's inputs (INPUT_MODE, INPUT_STACKS, …); see github-action/README.md")
		os.Exit(2)
	}
	cfg, err := inputs.Load(os.Getenv)
	if err != nil {
		workflow.Error(os.Stdout, err.Error())
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := action.Run(ctx, cfg, action.Deps{}, os.Stdout)
	stop()
	os.Exit(code)
}
