package manifests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"
)

// TimeoutError is a git command that did not finish within its time (the
// git-timeout input): a git server that never answers.
type TimeoutError struct {
	// Op is git's subcommand ("fetch", "cat-file").
	Op      string
	Timeout time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("git %s did not finish within %s (the git-timeout input): stopped", e.Op, e.Timeout)
}

// gitCmd is how this package runs the git CLI: in dir, with env (nil for
// the process's environment), each command bounded by timeout (0: only by
// the context). When the time is up, git and every process it started are
// killed (its remote helper, git-remote-https, holds the connection to a
// server that may never answer) and their output is abandoned after
// waitDelay, so no git command can hold the job.
type gitCmd struct {
	dir     string
	env     []string
	timeout time.Duration
}

// waitDelay bounds how long a killed git's output pipes are waited for.
const waitDelay = 5 * time.Second

// run runs git with args and stdin (nil for none) and returns its standard
// output; an error carries its standard error (raw: callers shorten it).
func (g gitCmd) run(ctx context.Context, stdin io.Reader, args ...string) (string, string, error) {
	cctx := ctx
	if g.timeout > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, g.timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(cctx, "git", args...)
	cmd.Dir, cmd.Env, cmd.Stdin = g.dir, g.env, stdin
	killTree(cmd)
	cmd.WaitDelay = waitDelay
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
		return stdout.String(), stderr.String(), &TimeoutError{Op: gitOp(args), Timeout: g.timeout}
	}
	if err != nil && ctx.Err() != nil {
		return stdout.String(), stderr.String(), fmt.Errorf("git %s: %w", gitOp(args), ctx.Err())
	}
	return stdout.String(), stderr.String(), err
}

// output runs git and returns its standard output; an error names the
// subcommand and quotes git's standard error.
func (g gitCmd) output(ctx context.Context, args ...string) (string, error) {
	out, stderr, err := g.run(ctx, nil, args...)
	var te *TimeoutError
	if err != nil && !errors.As(err, &te) {
		return "", fmt.Errorf("git %s: %v: %s", gitOp(args), err, strings.TrimSpace(stderr))
	}
	return out, err
}

// gitOp is the subcommand of a git command line (after any -c options).
func gitOp(args []string) string {
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "-c" || args[i] == "-C":
			i++
		case !strings.HasPrefix(args[i], "-"):
			return args[i]
		}
	}
	return "git"
}
