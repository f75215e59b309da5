// Command gen writes the Argo CD install files of argocd-health (a kustomize
// Component patching argocd-cm, and Helm values for the argo-cd chart) from
// the embedded Lua scripts:
//
//	go run ./argocd-health/cmd/gen            # from the repository root
//	go run ./argocd-health/cmd/gen -dir DIR
package main

import (
	"flag"
	"fmt"
	"os"

	argocdhealth "github.com/stackflow-io/stackflow/argocd-health"
)

func main() {
	dir := flag.String("dir", "argocd-health/install", "directory to write the install files into")
	flag.Parse()
	if err := argocdhealth.WriteInstall(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
