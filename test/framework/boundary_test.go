package framework

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestNothingThatShipsImportsTheHarness: no binary of the product (the
// operator, the agent, the analysis service, the Kargo steps, the GitHub
// Action, the image builder) links the test framework, the in-process
// operator or the developer tools.
func TestNothingThatShipsImportsTheHarness(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./operator/cmd/...", "./analysis/cmd/...", "./kargo-steps/cmd/...",
		"./github-action/cmd/...", "./images/cmd/...")
	cmd.Dir = substrate.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/stackflow-io/stackflow/"
	n := 0
	for _, pkg := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(pkg, module)
		if !ok {
			continue
		}
		n++
		if strings.HasPrefix(rel, "test/") || strings.HasPrefix(rel, "operator/devtools") || strings.HasSuffix(rel, "/operatortest") {
			t.Errorf("%s is linked into a shipped binary", rel)
		}
	}
	if n < 20 {
		t.Fatalf("go list named %d packages of the module: is the pattern list right?", n)
	}
}
