package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/stackflow-io/stackflow/analysis/verification"
	"github.com/stackflow-io/stackflow/kargo-steps/waiter"
)

// Exit codes.
const (
	// ExitOK: done (the commit is set, the Stack applied it, every Stack
	// is editable).
	ExitOK = 0
	// ExitFailed: the wait ended Failed or timed out; lint found a Stack
	// the open-source task cannot edit; set-commit could not edit.
	ExitFailed = 1
	// ExitUsage: bad flags or arguments.
	ExitUsage = 2
)

// OutputEnv names the file a step's output is written to (Akuity
// CustomPromotionStep, output.source File).
const OutputEnv = "KARGO_OUTPUT"

// DefaultTokenFile is where wait looks for its token by default: a projected
// ServiceAccount token volume with the audience stackflow-analysis, mounted
// at /var/run/secrets/stackflow/analysis (see kargo-steps/README.md).
const DefaultTokenFile = "/var/run/secrets/stackflow/analysis/token"

// PodTokenFile is where a pod's own ServiceAccount token is mounted. wait
// never sends it: it is a credential for the API server, which whatever
// --url names would receive, and stackflow-analysis refuses its audience.
const PodTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// TokenEnv gives wait its token when no token file is given or mounted: for
// a step that cannot mount a volume (an Akuity CustomPromotionStep passes it
// from its config). It is no flag, so a token never appears on a command
// line.
const TokenEnv = EnvPrefix + "TOKEN"

// DefaultStackNotFoundGrace is how long wait accepts, by default, that the
// Stack does not exist: Argo CD polls git every 3 minutes when nothing
// triggers a sync. The stackflow-promote tasks' stackNotFoundGrace has the
// same default.
const DefaultStackNotFoundGrace = 5 * time.Minute

// version is set at build time.
var Version = "dev"

const usage = `stackflow-kargo promotes Stacks in a Kargo pipeline.

Usage:
  stackflow-kargo set-commit --dir DIR --stack NAME [--namespace NS] --commit SHA
  stackflow-kargo wait --url ANALYSIS_URL --namespace NS --stack NAME --commit SHA [--operation up|preview] [--timeout D] [--stack-not-found-grace D] [--token-file F]
  stackflow-kargo lint --dir DIR
  stackflow-kargo version

  set-commit  edit spec.commit of one Stack manifest in place (any document of a multi-document file;
              creates spec.commit, removes spec.branch, keeps everything else byte for byte)
  wait        wait until the operator applied the commit, asking the analysis service (exit 0 on Succeeded,
              1 on Failed, timeout, or a Stack still missing after the grace); writes the result to
              $KARGO_OUTPUT when set
  lint        tell which Stacks Kargo's open-source yaml-update step (the stackflow-promote task) can edit,
              and the stackFile var for each; exit 1 if one cannot be edited

Run "stackflow-kargo <command> -h" for a command's flags. See kargo-steps/README.md.
`

// Main runs the command line and returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	switch args[0] {
	case "set-commit":
		return setCommit(args[1:], stdout, stderr)
	case "wait":
		return wait(ctx, args[1:], stdout, stderr)
	case "lint":
		return lint(args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "stackflow-kargo", Version)
		return ExitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return ExitOK
	}
	fmt.Fprintf(stderr, "unknown command %q\n\n%s", args[0], usage)
	return ExitUsage
}

func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: stackflow-kargo %s\n\nEach flag may also come from the environment: --commit from %s, --token-file from %s, and so on.\n\n", synopsis, EnvName("commit"), EnvName("token-file"))
		fs.PrintDefaults()
	}
	return fs
}

// EnvPrefix prefixes the environment variables that give flags their
// values (STACKFLOW_KARGO_COMMIT for --commit, STACKFLOW_KARGO_TOKEN_FILE
// for --token-file): an Akuity CustomPromotionStep passes its config that
// way. An empty variable counts as unset; a flag given on the command line
// wins.
const EnvPrefix = "STACKFLOW_KARGO_"

// EnvName is the environment variable of a flag.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parse sets flags from the environment, then parses the arguments; it
// reports whether to go on, and the exit code if not.
func parse(fs *flag.FlagSet, args []string) (bool, int) {
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v := os.Getenv(EnvName(f.Name)); v != "" && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("$%s: %w", EnvName(f.Name), err)
			}
		}
	})
	if envErr != nil {
		fmt.Fprintln(fs.Output(), "error:", envErr)
		return false, ExitUsage
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return false, ExitOK
		}
		return false, ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %v\n", fs.Args())
		fs.Usage()
		return false, ExitUsage
	}
	return true, 0
}

func wait(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("wait", "wait --url ANALYSIS_URL --namespace NS --stack NAME --commit SHA [--operation up|preview] [--timeout D] [--stack-not-found-grace D] [--deny-on OPS] [--token-file F]", stderr)
	var o waiter.Options
	var op, denyOn string
	var grace time.Duration
	fs.StringVar(&o.URL, "url", "", "base URL of the analysis service, e.g. http://stackflow-analysis.stackflow-system.svc:8080 (required)")
	fs.StringVar(&o.Namespace, "namespace", "", "namespace of the Stack (required)")
	fs.StringVar(&o.Stack, "stack", "", "name of the Stack (required)")
	fs.StringVar(&o.Commit, "commit", "", "the commit the Stack must have applied: 7 to 40 hexadecimal characters (required)")
	fs.StringVar(&op, "operation", "up", "up (the commit applied) or preview (the commit previewed)")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "how long to wait before giving up (exit 1)")
	fs.DurationVar(&grace, "stack-not-found-grace", DefaultStackNotFoundGrace, "how long, from the start of the wait, the Stack may not exist (Argo CD has not synced it yet); after it the service answers Failed (StackNotFound) and the wait exits 1, naming the Stack: a mistyped --stack or --namespace fails in minutes, not at --timeout. 0: the Stack must exist at once")
	fs.StringVar(&denyOn, "deny-on", "", "for a Stack that requires approval (spec.approval.required): planned operations, comma-separated among create, update, delete (which includes replace) and replace, that end the wait Failed (PlanDenied) while the plan awaits approval, before anything is applied; a Stack that does not require approval then fails at once (ApprovalNotRequired)")
	fs.StringVar(&o.TokenFile, "token-file", "", "file holding the bearer token sent to the service, read before each request: a ServiceAccount token for the audience stackflow-analysis (default: the token in $"+TokenEnv+" when set, else "+DefaultTokenFile+", a projected token volume, when it exists, else none). The pod's own token ("+PodTokenFile+") is never sent")
	if ok, code := parse(fs, args); !ok {
		return code
	}
	if grace < 0 {
		fmt.Fprintln(stderr, "error: --stack-not-found-grace must not be negative")
		return ExitUsage
	}
	var err error
	if o.DenyOn, err = verification.ParseDenyOn(denyOn); err != nil {
		fmt.Fprintln(stderr, "error: --deny-on:", err)
		return ExitUsage
	}
	// Counted from now, the start of the wait, and sent with every request:
	// the service keeps no state between them.
	o.NotFoundAfter = time.Now().Add(grace)
	o.Operation = verification.Operation(op)
	o.TokenFile, o.Token = tokenSource(o.TokenFile, os.Getenv(TokenEnv), fileExists)
	if o.TokenFile == "" && o.Token == "" {
		fmt.Fprintf(stderr, "No token: mount a projected ServiceAccount token for the audience stackflow-analysis at %s, or give --token-file or $%s; the service answers 401 unless it runs with --auth=none\n", DefaultTokenFile, TokenEnv)
	}
	o.Progress = func(r verification.Result) {
		fmt.Fprintf(stderr, "%s %s: %s (%s): %s\n", time.Now().UTC().Format(time.TimeOnly), o.Stack, r.Phase, r.Reason, r.Message)
	}
	out, err := waiter.Wait(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		fs.Usage()
		return ExitUsage
	}
	if err := writeOutput(stepOutput(o, out)); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return ExitFailed
	}
	if out.Succeeded {
		fmt.Fprintf(stdout, "Stack %s/%s: %s\n", o.Namespace, o.Stack, out.Message)
		return ExitOK
	}
	fmt.Fprintf(stderr, "Stack %s/%s: %s: %s\n", o.Namespace, o.Stack, out.Reason, out.Message)
	return ExitFailed
}

// tokenSource says where wait's token comes from: the given file, else the
// token of $STACKFLOW_KARGO_TOKEN, else DefaultTokenFile when it exists,
// else nothing. Never PodTokenFile.
func tokenSource(file, envToken string, exists func(string) bool) (string, string) {
	switch {
	case file != "":
		return file, ""
	case strings.TrimSpace(envToken) != "":
		return "", strings.TrimSpace(envToken)
	case exists(DefaultTokenFile):
		return DefaultTokenFile, ""
	}
	return "", ""
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Output is what wait writes to $KARGO_OUTPUT (JSON): a later step reads
// it as outputs.<alias>.<field>.
type Output struct {
	Succeeded bool   `json:"succeeded"`
	Phase     string `json:"phase,omitempty"`
	Reason    string `json:"reason"`
	Message   string `json:"message"`
	Namespace string `json:"namespace"`
	Stack     string `json:"stack"`
	Commit    string `json:"commit"`
	// Update and Permalink name the update that applied (or failed) the
	// commit.
	Update    string `json:"update,omitempty"`
	Permalink string `json:"permalink,omitempty"`
}

func stepOutput(o waiter.Options, out waiter.Outcome) Output {
	r := Output{Succeeded: out.Succeeded, Phase: string(out.Result.Phase), Reason: out.Reason, Message: out.Message,
		Namespace: o.Namespace, Stack: o.Stack, Commit: o.Commit}
	if out.Result.ObservedCommit != nil {
		r.Commit = out.Result.ObservedCommit.SHA
	}
	if u := out.Result.Update; u != nil {
		r.Update, r.Permalink = u.Name, u.Permalink
	}
	return r
}

// writeOutput writes v as JSON to $KARGO_OUTPUT, when set.
func writeOutput(v any) error {
	path := os.Getenv(OutputEnv)
	if path == "" {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write the step output to $%s: %w", OutputEnv, err)
	}
	return nil
}
