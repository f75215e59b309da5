package agent

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

// Options configure a workspace agent.
// SecretEnvNamesEnv is the environment variable in which the workspace
// runtime lists (comma-separated) the names of the variables it set from
// Secrets (env secretKeyRef, envFrom Secrets): their values are redacted like
// those of --secret-env. The runtimes set it as
// pod.SecretEnvNamesVar (the agent does not import the pod builder).
const SecretEnvNamesEnv = "STACKFLOW_SECRET_ENV"

type Options struct {
	// WorkDir is the agent's scratch directory; the program is fetched under it.
	WorkDir string
	// Source is the program to fetch.
	Source Source
	// PulumiRoot holds bin/pulumi; empty means pulumi from PATH.
	PulumiRoot string
	// Env is extra environment for the pulumi processes.
	Env map[string]string
	// LogLevel is the engine's verbosity (pulumi -v); 0 disables it.
	LogLevel uint
	// Hostname identifies this workspace in stack locks; default os.Hostname.
	Hostname string
	// SecretEnv names environment variables whose values are secrets to redact.
	SecretEnv []string
	// RunRetention bounds the finished runs kept for GetOperation and
	// WatchOperation; zero fields take the defaults.
	RunRetention RunRetention
	// PrepareTimeout bounds each preparation of the program — fetching it
	// and `pulumi install`, at start and for each Checkout; zero means
	// DefaultPrepareTimeout.
	PrepareTimeout time.Duration
}

// DefaultPrepareTimeout bounds a preparation of the program (the fetch and
// `pulumi install`) unless Options.PrepareTimeout (--prepare-timeout) says
// otherwise. A hung fetch or package install would otherwise keep an
// in-place checkout running, and the workspace refusing every operation, for
// ever; long enough for a large npm or pip install on a slow node.
const DefaultPrepareTimeout = 15 * time.Minute

// Server implements the agent API over one fetched program.
type Server struct {
	agentv1.UnimplementedAgentServer

	log logr.Logger
	// cmd is the pulumi CLI; env the environment of its processes.
	cmd auto.PulumiCommand
	env map[string]string
	// source is the source as the agent was started with; workDir holds
	// the checkouts.
	source   Source
	workDir  string
	version  string
	hostname string
	instance string
	logLevel uint
	redact   *redactor
	alive    processAlive
	// now is the clock for run start and end times and run eviction.
	now func() time.Time
	// retention decides which finished runs are evicted.
	retention RunRetention
	// runner runs an operation to its result (runWithRecovery; replaced in
	// tests of the run registry).
	runner func(ctx context.Context, log logr.Logger, r *run, req *agentv1.StartOperationRequest) *agentv1.Operation

	mu   sync.Mutex
	runs map[string]*run
	// busy maps a stack name to the update ID running on it: one operation per
	// stack at a time in this workspace.
	busy map[string]string
	// configKeys are the configuration keys set through SelectStack, by stack,
	// each with whether it is a property path.
	configKeys map[string]map[string]bool
	// stacks are the stacks selected through SelectStack: operations use them
	// directly, saving a `pulumi stack select` per run.
	stacks map[string]auto.Stack
	// selected holds, by stack, the digest of the SelectStack request last
	// applied: the same request again is answered at once, even while an
	// update runs, so the operator needs no memory of what it applied.
	selected map[string]string
	// selecting counts the SelectStack calls in progress: no checkout
	// starts under them.
	selecting int
	// selections are the selections in progress, by stack (select.go).
	selections map[string]*selection
	// program is the checked-out revision; replaced (under mu) only by a
	// checkout, while no operation or SelectStack runs.
	program program
	// checkout is the last checkout requested (nil when none);
	// checkouts counts the successful ones.
	checkout  *checkout
	checkouts int64
	// checkoutDirs numbers the checkout directories (source.<n>).
	checkoutDirs int
	// prepareTimeout bounds each prepare.
	prepareTimeout time.Duration
}

// New fetches the program, installs its dependencies and returns a server.
func New(ctx context.Context, log logr.Logger, opts Options) (*Server, error) {
	if err := os.MkdirAll(opts.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("create work directory: %w", err)
	}
	// The work directory outlives a restarted container (an emptyDir): clear
	// the checkouts a previous agent left.
	if err := clearSources(opts.WorkDir); err != nil {
		return nil, err
	}
	red := newRedactor()
	red.add(opts.Source.GitAuth.Secrets()...)
	for _, name := range opts.SecretEnv {
		red.add(os.Getenv(name), opts.Env[name])
	}
	cmd, err := newPulumiCLI(opts.PulumiRoot, red)
	if err != nil {
		return nil, fmt.Errorf("find the pulumi CLI: %w", err)
	}
	env := map[string]string{"PULUMI_SKIP_UPDATE_CHECK": "true"}
	for k, v := range opts.Env {
		env[k] = v
	}
	hostname := opts.Hostname
	if hostname == "" {
		hostname, _ = os.Hostname()
	}
	s := newServer(log, red, opts.RunRetention)
	s.cmd, s.env, s.source, s.workDir = cmd, env, opts.Source, opts.WorkDir
	s.version, s.hostname, s.logLevel = cmd.Version().String(), hostname, opts.LogLevel
	if opts.PrepareTimeout > 0 {
		s.prepareTimeout = opts.PrepareTimeout
	}
	prog, err := s.prepare(ctx, log, opts.Source, filepath.Join(opts.WorkDir, "source"))
	if err != nil {
		return nil, err
	}
	s.program = prog
	return s, nil
}

// program is one revision of the source, fetched and installed.
type program struct {
	ws     auto.Workspace
	wsOpts []auto.LocalWorkspaceOption
	// revision is the commit SHA or artifact digest fetched; sourceRef the
	// revision as requested (sourceRef).
	revision, sourceRef string
	project             workspace.Project
	// dir is the directory it was fetched into.
	dir string
}

// sourceRef is the revision of src as requested: the git ref as given, the
// artifact digest, or "" for a local directory.
func sourceRef(src Source) string {
	switch {
	case src.GitURL != "":
		return src.GitRef
	case src.ArtifactURL != "":
		return src.ArtifactDigest
	}
	return ""
}

// prepare fetches src into dir (created afresh), opens the Pulumi project
// there and installs its dependencies, within s.prepareTimeout: a fetch or an
// install still running then is stopped, and fails classified (it stalls the
// Workspace, which asks again after a minute) with what it last printed.
func (s *Server) prepare(ctx context.Context, log logr.Logger, src Source, dir string) (program, error) {
	if err := os.RemoveAll(dir); err != nil {
		return program{}, fmt.Errorf("clear source directory: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return program{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.prepareTimeout)
	defer cancel()
	log.Info("Fetching program source", "ref", sourceRef(src))
	fetched, err := Fetch(ctx, src, dir)
	if len(fetched.Tokens) > 0 {
		// The installation token the fetch was given replaces the one
		// before it (kept as the previous set): an agent checking out
		// revisions for weeks keeps two tokens, not one per hour.
		s.redact.replace(appTokenScope, fetched.Tokens...)
	}
	if err != nil {
		if timedOut(ctx) {
			err = sourceUnavailable(fmt.Errorf("the fetch did not finish within %s (--prepare-timeout): %w", s.prepareTimeout, err))
		}
		return program{}, fmt.Errorf("fetch program: %w", err)
	}
	log.Info("Fetched program source", "revision", fetched.Revision, "dir", fetched.ProgramDir)

	red := s.redact
	wsOpts := []auto.LocalWorkspaceOption{auto.WorkDir(fetched.ProgramDir), auto.Pulumi(s.cmd), auto.EnvVars(s.env)}
	ws, err := auto.NewLocalWorkspace(ctx, wsOpts...)
	if err != nil {
		return program{}, installationFailed(fmt.Errorf("open Pulumi workspace in %s: %s", fetched.ProgramDir, red.summarize(err)))
	}
	proj, err := ws.ProjectSettings(ctx)
	if err != nil {
		return program{}, installationFailed(fmt.Errorf("read Pulumi.yaml: %s", red.redact(err.Error())))
	}
	log.Info("Installing program dependencies", "project", proj.Name, "runtime", proj.Runtime.Name())
	last := &lastLine{}
	stdout, stderr := newLogWriter(log, red, last), newLogWriter(log, red, last)
	err = ws.Install(ctx, &auto.InstallOptions{Stdout: stdout, Stderr: stderr})
	stdout.Flush()
	stderr.Flush()
	if err != nil {
		if timedOut(ctx) {
			return program{}, installationFailed(fmt.Errorf("install dependencies (pulumi install): did not finish within %s (--prepare-timeout); its last output: %s",
				s.prepareTimeout, last))
		}
		return program{}, installationFailed(fmt.Errorf("install dependencies (pulumi install): %s", red.summarize(err)))
	}
	return program{ws: ws, wsOpts: wsOpts, revision: fetched.Revision, sourceRef: sourceRef(src), project: *proj, dir: dir}, nil
}

// timedOut: ctx ended at its deadline (the preparation's, or its caller's),
// not by a cancellation.
func timedOut(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	// By the clock too: what ran out may have been a connection's deadline,
	// the same instant, before the context's timer marked it done.
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// newServer returns a server with empty registries and no workspace.
func newServer(log logr.Logger, red *redactor, retention RunRetention) *Server {
	s := &Server{
		log: log, instance: newInstanceID(), redact: red, alive: livePulumiProcess,
		now: time.Now, retention: retention.withDefaults(), prepareTimeout: DefaultPrepareTimeout,
		runs: map[string]*run{}, busy: map[string]string{}, configKeys: map[string]map[string]bool{}, stacks: map[string]auto.Stack{},
		selected: map[string]string{}, selections: map[string]*selection{},
	}
	s.runner = s.runWithRecovery
	return s
}

// Info describes the workspace.
func (s *Server) Info(context.Context, *agentv1.InfoRequest) (*agentv1.InfoResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	info := &agentv1.InfoResponse{
		PulumiVersion:  s.version,
		ProjectName:    string(s.program.project.Name),
		ProjectRuntime: s.program.project.Runtime.Name(),
		Revision:       s.program.revision,
		Instance:       s.instance,
		SourceRef:      s.program.sourceRef,
		Checkouts:      s.checkouts,
	}
	if s.program.ws != nil {
		info.WorkDir = s.program.ws.WorkDir()
	}
	if s.checkout != nil {
		info.Checkout = proto.Clone(s.checkout.status).(*agentv1.CheckoutStatus)
	}
	return info, nil
}

// selectDigest identifies a SelectStack request (kept in memory only: the
// request holds secret values).
func selectDigest(req *agentv1.SelectStackRequest) string {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	sum := sha256.Sum256(b)
	return string(sum[:])
}

// configValue is a resolved configuration value.
type configValue struct {
	key    string
	path   bool
	secret bool
	// value is the value's string form; object is set for non-string JSON
	// values (numbers, booleans, objects, arrays), which keep their type.
	value  string
	object any
}

// resolveConfig reads each item's value and returns them with the plain text of
// the secret ones (for redaction). Errors name the key, never the value.
func resolveConfig(items []*agentv1.ConfigItem) ([]configValue, []string, error) {
	var out []configValue
	var secrets []string
	for _, it := range items {
		if it.GetKey() == "" {
			return nil, nil, errors.New("a configuration item has no key")
		}
		var raw string
		parseJSON := it.GetJson()
		switch src := it.GetSource().(type) {
		case *agentv1.ConfigItem_ValueJson:
			raw, parseJSON = src.ValueJson, true
		case *agentv1.ConfigItem_ValueFromEnv:
			v, ok := os.LookupEnv(src.ValueFromEnv)
			if !ok {
				return nil, nil, fmt.Errorf("config %s: environment variable %s is not set", it.GetKey(), src.ValueFromEnv)
			}
			raw = v
		case *agentv1.ConfigItem_ValueFromFile:
			b, err := os.ReadFile(src.ValueFromFile)
			if err != nil {
				return nil, nil, fmt.Errorf("config %s: read %s: %w", it.GetKey(), src.ValueFromFile, err)
			}
			raw = strings.TrimRight(string(b), "\n")
		default:
			return nil, nil, fmt.Errorf("config %s: no value", it.GetKey())
		}
		c := configValue{key: it.GetKey(), path: it.GetPath(), secret: it.GetSecret(), value: raw}
		if parseJSON {
			var v any
			if err := json.Unmarshal([]byte(raw), &v); err != nil {
				return nil, nil, fmt.Errorf("config %s: value is not valid JSON: %v", it.GetKey(), jsonErrorWithoutValue(err))
			}
			if str, ok := v.(string); ok {
				c.value = str
			} else {
				c.object = v
				b, _ := json.Marshal(v)
				c.value = string(b)
			}
		}
		if c.secret {
			secrets = append(secrets, c.value, raw)
		}
		out = append(out, c)
	}
	return out, secrets, nil
}

// jsonErrorWithoutValue keeps the JSON error's position, which never quotes the
// (possibly secret) input.
func jsonErrorWithoutValue(err error) string {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Sprintf("syntax error at offset %d", syn.Offset)
	}
	return "not a JSON value"
}

// applyConfig sets the stack's configuration and removes keys this agent set
// before that are no longer wanted. Keys from a committed Pulumi.<stack>.yaml
// that the operator never set are left alone.
func (s *Server) applyConfig(ctx context.Context, stack auto.Stack, cfg []configValue) error {
	s.mu.Lock()
	previous := s.configKeys[stack.Name()]
	s.mu.Unlock()
	// want maps each key to whether it is a property path.
	want := map[string]bool{}
	for _, c := range cfg {
		want[c.key] = c.path
	}
	stale := map[bool][]string{}
	for k, path := range previous {
		if _, ok := want[k]; !ok {
			stale[path] = append(stale[path], k)
		}
	}
	for path, keys := range stale {
		if err := stack.RemoveAllConfigWithOptions(ctx, keys, &auto.ConfigOptions{Path: path}); err != nil {
			return err
		}
	}
	// Everything but path keys in one `pulumi config set-all --json`, which
	// keeps numbers, booleans, objects and arrays typed.
	type jsonValue struct {
		Value       string `json:"value"`
		ObjectValue any    `json:"objectValue,omitempty"`
		Secret      bool   `json:"secret,omitempty"`
	}
	all := map[string]jsonValue{}
	for _, c := range cfg {
		if c.path {
			if err := stack.SetConfigWithOptions(ctx, c.key, auto.ConfigValue{Value: c.value, Secret: c.secret}, &auto.ConfigOptions{Path: true}); err != nil {
				return fmt.Errorf("key %s: %w", c.key, err)
			}
			continue
		}
		all[c.key] = jsonValue{Value: c.value, ObjectValue: c.object, Secret: c.secret}
	}
	if len(all) > 0 {
		b, err := json.Marshal(all)
		if err != nil {
			return err
		}
		if err := stack.SetAllConfigJson(ctx, string(b), nil); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.configKeys[stack.Name()] = want
	s.stacks[stack.Name()] = stack
	s.mu.Unlock()
	return nil
}

func newInstanceID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
