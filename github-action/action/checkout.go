package action

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/stackflow-io/stackflow/github-action/gitcli"
)

// checkoutCredentials returns the names of the git configuration entries
// that hold an HTTP header (http.<url>.extraheader) in the configuration
// git reads in dir: where actions/checkout stores the workflow's token
// unless told persist-credentials: false. The previewed program runs in
// that checkout and can read them. Only the names are returned: the values
// are never read into the action.
func checkoutCredentials(ctx context.Context, dir string, timeout time.Duration) []string {
	out, err := gitcli.Cmd{Dir: dir, Timeout: timeout}.Output(ctx, "config", "--get-regexp", "--name-only", `^http\.(.*\.)?extraheader$`)
	if err != nil {
		return nil // none (git exits 1), or not a repository
	}
	var names []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" && !slices.Contains(names, l) {
			names = append(names, l)
		}
	}
	return names
}
