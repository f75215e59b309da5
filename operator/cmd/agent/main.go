// Command agent is the Stackflow workspace agent: it fetches one Pulumi program
// and serves the operator's RPC API inside a workspace. See package agent.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/go-logr/stdr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/stackflow-io/stackflow/operator/internal/agent"
	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
	"github.com/stackflow-io/stackflow/operator/internal/gitremote"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "install" {
		// The workspace pod's init container copies the agent into the shared
		// volume with this, so the operator image needs no shell or cp.
		if err := install(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "agent install:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) < 2 || os.Args[1] != "serve" {
		fmt.Fprintln(os.Stderr, "usage: agent serve [flags] | agent install DEST   (agent serve -h lists the flags)")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	var (
		opts        agent.Options
		so          agent.ServeOptions
		auth        string
		tokenEnv    string
		audience    string
		workspace   string
		logLevel    uint
		secretEnv   string
		termPath    string
		envFromFlag multiFlag
		fetchBytes  = gitremote.ByteSize(gitremote.DefaultMaxFetchBytes)
	)
	fs.StringVar(&opts.WorkDir, "workdir", "/share/workspace", "scratch directory; the program is fetched under it")
	fs.StringVar(&so.Listen, "listen", ":50051", "address to serve the agent API on")
	fs.StringVar(&so.AddressFile, "address-file", "", "write the bound address to this file once serving")
	fs.StringVar(&auth, "auth", "token", `authentication: "token" (bearer token from $STACKFLOW_AGENT_TOKEN) or "kube" (ServiceAccount tokens checked with TokenReview and SubjectAccessReview)`)
	fs.StringVar(&tokenEnv, "token-env", "STACKFLOW_AGENT_TOKEN", "environment variable holding the bearer token for --auth=token")
	fs.StringVar(&audience, "kube-audience", "stackflow-agent", "token audience for --auth=kube")
	fs.StringVar(&workspace, "kube-workspace", "", "namespace/name of this Workspace, for --auth=kube")
	fs.StringVar(&opts.Source.GitURL, "git-url", "", "git repository holding the program")
	fs.StringVar(&opts.Source.GitRef, "git-ref", "", "commit SHA or branch to check out at start (the operator moves a running agent to another revision with the Checkout call)")
	fs.BoolVar(&opts.Source.GitShallow, "git-shallow", false, "fetch only the needed commit")
	fs.StringVar(&opts.Source.ArtifactURL, "artifact-url", "", "tarball holding the program")
	fs.StringVar(&opts.Source.ArtifactDigest, "artifact-digest", "", "the tarball's sha256:<hex> digest")
	fs.StringVar(&opts.Source.LocalDir, "local-dir", "", "directory already holding the program")
	fs.StringVar(&opts.Source.Dir, "dir", "", "program directory within the repository or artifact")
	fs.StringVar(&opts.PulumiRoot, "pulumi-root", "", "directory holding bin/pulumi (default: pulumi from PATH)")
	fs.UintVar(&logLevel, "pulumi-log-level", 0, "engine log verbosity")
	fs.StringVar(&secretEnv, "secret-env", "PULUMI_ACCESS_TOKEN,PULUMI_CONFIG_PASSPHRASE,AWS_SECRET_ACCESS_KEY,AWS_SESSION_TOKEN,ARM_CLIENT_SECRET,GOOGLE_CREDENTIALS", "comma-separated environment variables whose values are redacted from all output")
	fs.Var(&envFromFlag, "env", "KEY=VALUE environment for pulumi (repeatable)")
	fs.StringVar(&termPath, "termination-message-path", defaultTerminationPath, "file receiving one line saying why the agent stopped (\"SourceUnavailable: …\", \"InstallationFailed: …\" or the error), read by the workspace runtime; the default, the kubelet's, is written only if it exists")
	fs.DurationVar(&opts.RunRetention.Retention, "finished-run-retention", agent.DefaultFinishedRunRetention, "how long a finished run (its result and buffered events) stays available to GetOperation and WatchOperation after it ended; running runs are never evicted")
	fs.IntVar(&opts.RunRetention.MaxFinished, "max-finished-runs", agent.DefaultMaxFinishedRuns, "the most finished runs kept; beyond it the runs that ended first are evicted first")
	fs.DurationVar(&opts.PrepareTimeout, "prepare-timeout", agent.DefaultPrepareTimeout, "the longest a preparation of the program may take — the fetch and pulumi install, at start and for each in-place checkout; one still running then is stopped and fails (SourceUnavailable while fetching, InstallationFailed while installing, with the install's last output line, redacted)")
	fs.DurationVar(&opts.Source.GitLimits.IdleTimeout, strings.TrimPrefix(gitremote.IdleTimeoutFlag, "--"), gitremote.DefaultIdleTimeout, "a git server that sends nothing for this long fails the fetch, which the operator asks for again; the fetch as a whole is bounded by --prepare-timeout")
	fs.Var(&fetchBytes, strings.TrimPrefix(gitremote.MaxFetchBytesFlag, "--"), "the most a fetch of a revision reads from the git server, e.g. 4Gi; a server sending more fails it")
	var apiHosts string
	fs.StringVar(&apiHosts, "github-api-hosts", "", "comma-separated hosts (host or host:port) besides api.github.com that a GitHub App's apiURL may name (GitHub Enterprise Server); the operator passes its own --github-api-hosts. An App naming another host fails the fetch before anything is sent")
	_ = fs.Parse(os.Args[2:])
	for _, h := range strings.Split(apiHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			gitauth.DefaultAppTokens.APIHosts = append(gitauth.DefaultAppTokens.APIHosts, h)
		}
	}
	opts.Source.GitLimits.MaxBytes = int64(fetchBytes)
	opts.Source.GitLimits.IdleFlag, opts.Source.GitLimits.BytesFlag = gitremote.IdleTimeoutFlag, gitremote.MaxFetchBytesFlag
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "termination-message-path" })
	term := terminationFile{path: termPath, create: explicit}

	log := stdr.New(nil).WithName("agent")
	stdr.SetVerbosity(int(logLevel))
	opts.LogLevel = logLevel
	creds, err := gitauth.FromEnv(os.Getenv)
	if err != nil {
		fail(log, term, &agent.PrepareError{Reason: agent.ReasonSourceUnavailable, Err: err})
	}
	opts.Source.GitAuth = creds
	opts.SecretEnv = strings.Split(secretEnv, ",")
	if names := os.Getenv(agent.SecretEnvNamesEnv); names != "" {
		opts.SecretEnv = append(opts.SecretEnv, strings.Split(names, ",")...)
	}
	opts.Env = map[string]string{}
	for _, kv := range envFromFlag {
		k, v, _ := strings.Cut(kv, "=")
		opts.Env[k] = v
	}

	if opts.RunRetention.Retention <= 0 || opts.RunRetention.MaxFinished <= 0 {
		fail(log, term, fmt.Errorf("--finished-run-retention (%s) and --max-finished-runs (%d) must be positive", opts.RunRetention.Retention, opts.RunRetention.MaxFinished))
	}
	if opts.PrepareTimeout <= 0 {
		fail(log, term, fmt.Errorf("--prepare-timeout=%s: give a positive duration, e.g. 15m", opts.PrepareTimeout))
	}
	authn, err := authenticator(auth, tokenEnv, audience, workspace)
	if err != nil {
		fail(log, term, err)
	}
	so.Auth = authn
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := agent.Serve(ctx, log, opts, so); err != nil {
		fail(log, term, err)
	}
}

func authenticator(kind, tokenEnv, audience, workspace string) (agent.Authenticator, error) {
	switch kind {
	case "token":
		tok := os.Getenv(tokenEnv)
		if tok == "" {
			return nil, fmt.Errorf("--auth=token needs a token in $%s", tokenEnv)
		}
		return agent.TokenAuthenticator{Token: tok}, nil
	case "kube":
		ns, name, ok := strings.Cut(workspace, "/")
		if !ok || ns == "" || name == "" {
			return nil, fmt.Errorf("--auth=kube needs --kube-workspace=namespace/name, got %q", workspace)
		}
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("--auth=kube: %w", err)
		}
		// Only TokenReviews and SubjectAccessReviews go through it: short
		// requests, each bounded so that a stalled API server fails the call.
		cfg.Timeout = agent.KubeRequestTimeout
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		return agent.KubeAuthenticator{Client: cs, Audience: audience, Namespace: ns, Workspace: name}, nil
	}
	return nil, fmt.Errorf("unknown --auth %q: use token or kube", kind)
}

// defaultTerminationPath is where the kubelet reads a container's
// termination message.
const defaultTerminationPath = "/dev/termination-log"

// terminationFile receives the agent's last word.
type terminationFile struct {
	path string
	// create: the path was given explicitly (the local runtime's); otherwise
	// only an existing file (the kubelet's) is written, so an agent run by
	// hand does not create /dev/termination-log.
	create bool
}

func (f terminationFile) write(line string) error {
	if f.path == "" {
		return nil
	}
	flags := os.O_WRONLY | os.O_TRUNC
	if f.create {
		flags |= os.O_CREATE
	}
	out, err := os.OpenFile(f.path, flags, 0o644)
	if errors.Is(err, os.ErrNotExist) && !f.create {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := out.WriteString(line + "\n"); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// fail logs why the agent stops, leaves it in the termination message file
// (classified: "SourceUnavailable: …"), and exits.
func fail(log logr.Logger, term terminationFile, err error) {
	line := agent.TerminationMessage(err)
	log.Error(err, "Agent stopped", "reason", agent.FailureReason(err), "terminationMessage", line)
	if werr := term.write(line); werr != nil {
		log.Error(werr, "Cannot write the termination message", "path", term.path)
	}
	os.Exit(1)
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// install copies this executable to dest.
func install(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dest+".tmp", os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(dest+".tmp", dest)
}
