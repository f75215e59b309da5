package cli

import (
	"fmt"
	"io"
)

// Replaced when kargo-steps/manifest lands.
func setCommit(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "set-commit: not built yet")
	return ExitFailed
}

func lint(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "lint: not built yet")
	return ExitFailed
}
