package substrate

import (
	"fmt"
	"os/exec"
)

// GoBuild builds the package (a path relative to the repository root, e.g.
// ./operator/cmd/agent) into out.
func GoBuild(out, pkg string) error {
	build := exec.Command("go", "build", "-o", out, pkg)
	build.Dir = RepoRoot()
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}
