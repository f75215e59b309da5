package gitcli

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

// Cmd runs the git CLI in Dir, with Env (nil for the process's
// environment), each command bounded by Timeout (0: only by the context).
// When the time is up, git and every process it started are killed (its
// remote helper, git-remote-https, holds the connection to a server that
// may never answer) and their output is abandoned after WaitDelay, so no
// git command can hold the job.
type Cmd struct {
	Dir     string
	Env     []string
	Timeout time.Duration
}

// WaitDelay bounds how long a killed git's output pipes are waited for.
const WaitDelay = 5 * time.Second

// Run runs git with args and stdin (nil for none) and returns its standard
// output and standard error; a command that timed out gives a
// *TimeoutError.
func (g Cmd) Run(ctx context.Context, stdin io.Reader, args ...string) (string, string, error) {
	cctx := ctx
	if g.Timeout > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, g.Timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(cctx, "git", args...)
	cmd.Dir, cmd.Env, cmd.Stdin = g.Dir, g.Env, stdin
	killTree(cmd)
	cmd.WaitDelay = WaitDelay
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
		return stdout.String(), stderr.String(), &TimeoutError{Op: op(args), Timeout: g.Timeout}
	}
	if err != nil && ctx.Err() != nil {
		return stdout.String(), stderr.String(), fmt.Errorf("git %s: %w", op(args), ctx.Err())
	}
	return stdout.String(), stderr.String(), err
}

// Output runs git and returns its standard output; an error names the
// subcommand and quotes git's standard error (a *TimeoutError as it is).
func (g Cmd) Output(ctx context.Context, args ...string) (string, error) {
	out, stderr, err := g.Run(ctx, nil, args...)
	var te *TimeoutError
	if err != nil && !errors.As(err, &te) {
		return "", fmt.Errorf("git %s: %v: %s", op(args), err, strings.TrimSpace(stderr))
	}
	return out, err
}

// op is the subcommand of a git command line (after any -c options).
func op(args []string) string {
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
