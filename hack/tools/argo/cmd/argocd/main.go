// Command argocd is the part of Argo CD v3's multi-call binary that the
// Argo CD e2e and `make demo` run: the application controller, the repo
// server, the API server, and git-ask-pass (which the repo server runs, as
// GIT_ASKPASS=argocd, to hand git a repository's credentials). Like Argo
// CD's own cmd/main.go it picks the component from ARGOCD_BINARY_NAME (or
// the name it is run as); leaving out the CLI, Dex, notifications, the
// ApplicationSet and commit servers and the other commands builds far less
// (see hack/substrate.sh build_argocd for the measured difference).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	appcontroller "github.com/argoproj/argo-cd/v3/cmd/argocd-application-controller/commands"
	gitaskpass "github.com/argoproj/argo-cd/v3/cmd/argocd-git-ask-pass/commands"
	reposerver "github.com/argoproj/argo-cd/v3/cmd/argocd-repo-server/commands"
	apiserver "github.com/argoproj/argo-cd/v3/cmd/argocd-server/commands"
	"github.com/argoproj/argo-cd/v3/util/log"
)

// As Argo CD v3's cmd/main.go does: klog (client-go's logger) logs through
// logrus with the configured level and format.
func init() {
	klog.SetLogger(log.NewLogrusLogger(log.NewWithCurrentConfig()))
}

func main() {
	name := filepath.Base(os.Args[0])
	if v := os.Getenv("ARGOCD_BINARY_NAME"); v != "" {
		name = v
	}
	var command *cobra.Command
	isCLI := false
	switch name {
	case "argocd-application-controller":
		command = appcontroller.NewCommand()
	case "argocd-repo-server":
		command = reposerver.NewCommand()
	case "argocd-server":
		command = apiserver.NewCommand()
	case "argocd-git-ask-pass":
		command = gitaskpass.NewCommand()
		isCLI = true
	default:
		fmt.Fprintf(os.Stderr, "%s: this build holds argocd-application-controller, argocd-repo-server, argocd-server and argocd-git-ask-pass only: set ARGOCD_BINARY_NAME to one of them\n", name)
		os.Exit(2)
	}
	if isCLI {
		command.SilenceErrors = true
		command.SilenceUsage = true
	}
	if err := command.Execute(); err != nil {
		os.Exit(1)
	}
}
