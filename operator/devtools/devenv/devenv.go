// Package devenv runs Stackflow on one machine with embedded defaults, for
// `make run`: a local control plane (the cached kube-apiserver and etcd) with
// the CRDs, the operator with the local workspace runtime, a file:// backend,
// the test resource provider, and a sample Stack tracking a git repository it
// creates.
//
// It imports the operator assembly and the test substrate (the same binaries
// the tests run).
package devenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/stackflow-io/stackflow/internal/conditions"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/local"
	"github.com/stackflow-io/stackflow/test/framework/provider"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// Options configure a local run.
type Options struct {
	// Dir holds everything the run makes (kubeconfig, backend, workspaces,
	// sample repository); it is wiped at start.
	Dir string
	// Sample creates the sample repository and Stack.
	Sample bool
	// UntilReady stops the run once the sample Stack is Ready (for tests and
	// CI), failing after this long; 0 runs until ctx ends.
	UntilReady time.Duration
	// Out receives progress lines.
	Out io.Writer
}

// SampleProgram is the sample's Pulumi YAML program: one record of the test
// provider, whose content comes from stack configuration.
const SampleProgram = `name: hello-stackflow
runtime: yaml
description: A sample program managed by Stackflow
config:
  greeting:
    type: string
resources:
  hello:
    type: stackflowtest:index:Record
    properties:
      name: hello
      content: ${greeting}
outputs:
  path: ${hello.path}
  greeting: ${hello.content}
`

// Run runs until ctx ends (or the sample is Ready, with UntilReady).
func Run(ctx context.Context, opts Options) error {
	out := opts.Out
	say := func(format string, args ...any) { fmt.Fprintf(out, "stackflow-dev: "+format+"\n", args...) }
	l, err := Start(ctx, LocalOptions{Dir: opts.Dir, ResyncEvery: 10 * time.Second, Say: say})
	if err != nil {
		return err
	}
	defer l.Stop()
	say("the operator runs with the local workspace runtime; workspaces live in %s", filepath.Join(l.Dir, "workspaces"))
	say("kubectl: export KUBECONFIG=%s; kubectl get stacks,workspaces,updates -A", l.Kubeconfig)

	if opts.Sample {
		repoURL, err := sampleRepo(ctx, filepath.Join(l.Dir, "sample"))
		if err != nil {
			return err
		}
		s := sampleStack(repoURL)
		if err := l.CP.Client.Create(ctx, s); err != nil {
			return fmt.Errorf("create sample stack: %w", err)
		}
		say("created Stack default/%s tracking branch main of %s (edit %s and commit to see it redeploy)", s.Name, repoURL, filepath.Join(l.Dir, "sample", "work"))
		go watchStack(l.ctx, l.CP.Client, s, say)
		if opts.UntilReady > 0 {
			return waitReady(ctx, l.CP.Client, s, opts.UntilReady, filepath.Join(l.Dir, "records", "hello"), say)
		}
	}
	say("press Ctrl-C to stop")
	select {
	case <-ctx.Done():
		return nil
	case err := <-l.Done():
		return err
	}
}

// LocalOptions configure Start.
type LocalOptions struct {
	// Dir holds everything the run makes; it is wiped at start.
	Dir string
	// ResyncEvery overrides every Stack's resync interval (how soon a pushed
	// commit of a tracked branch is seen).
	ResyncEvery time.Duration
	// WatchNamespaces limits the operator (default: all).
	WatchNamespaces []string
	// Say prints a progress line.
	Say func(format string, args ...any)
}

// Local is a running local Stackflow: a control plane with the CRDs and the
// operator with the local workspace runtime, a file:// backend
// (Dir/backend) and the test resource provider (records in Dir/records).
type Local struct {
	// Dir is the absolute run directory.
	Dir string
	// CP is the control plane.
	CP *substrate.ControlPlane
	// Kubeconfig is a system:masters kubeconfig file for kubectl.
	Kubeconfig string

	say  func(format string, args ...any)
	ctx  context.Context
	stop func()
	errc chan error
	op   interface{ Close() }
}

// Start builds the agent and the test provider, starts the control plane
// and the operator. Stop stops them.
func Start(ctx context.Context, o LocalOptions) (_ *Local, err error) {
	say := o.Say
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	for _, sub := range []string{"backend", "records", "workspaces", "artifacts", "bin"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, err
		}
	}

	paths, err := substrate.Locate()
	if err != nil {
		return nil, err
	}
	say("building the agent and the test resource provider")
	agentBin := filepath.Join(dir, "bin", "agent")
	if err := substrate.GoBuild(agentBin, "./operator/cmd/agent"); err != nil {
		return nil, err
	}
	home, err := substrate.InstallTestProvider(paths, filepath.Join(dir, "pulumi"))
	if err != nil {
		return nil, err
	}

	say("starting a local control plane (kube-apiserver %s, etcd) with the Stackflow CRDs", "v1.35.4")
	cp, err := substrate.StartControlPlane()
	if err != nil {
		return nil, err
	}
	l := &Local{Dir: dir, CP: cp, say: say, errc: make(chan error, 1)}
	defer func() {
		if err != nil {
			l.Stop()
		}
	}()
	if l.Kubeconfig, err = substrate.WriteKubeconfig(cp.Env, filepath.Join(dir, "kubeconfig")); err != nil {
		return nil, err
	}

	agentEnv := map[string]string{
		"PATH":                     filepath.Join(paths.PulumiRoot, "bin") + string(os.PathListSeparator) + paths.LanguageYAML + string(os.PathListSeparator) + os.Getenv("PATH"),
		"PULUMI_HOME":              home,
		"PULUMI_BACKEND_URL":       "file://" + filepath.Join(dir, "backend"),
		"PULUMI_CONFIG_PASSPHRASE": "stackflow-dev",
		"PULUMI_SKIP_UPDATE_CHECK": "true",
		"PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
		provider.DirEnv: filepath.Join(dir, "records"),
	}
	l.ctx, l.stop = context.WithCancel(ctx)
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{Scheme: operator.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:            operator.CacheOptions(o.WatchNamespaces),
		EventBroadcaster: operator.EventBroadcaster(), //nolint:staticcheck // as the operator binary's
	})
	if err != nil {
		return nil, err
	}
	op, err := operator.Setup(mgr, operator.Options{
		Runtime: operator.RuntimeLocal, LocalRoot: filepath.Join(dir, "workspaces"), AgentBinary: agentBin,
		PulumiRoot: paths.PulumiRoot, AgentEnv: agentEnv, ArtifactDir: filepath.Join(dir, "artifacts"),
		WorkspaceWorkers: 4, UpdateWorkers: 4, StackWorkers: 4, StackResyncOverride: o.ResyncEvery,
		LocalRestartBackoff: 5 * time.Second, WatchNamespaces: o.WatchNamespaces,
	})
	if err != nil {
		return nil, err
	}
	l.op = op
	go func() { l.errc <- mgr.Start(l.ctx) }()
	return l, nil
}

// Done delivers the operator's error if it stops before Stop.
func (l *Local) Done() <-chan error { return l.errc }

// Stop stops the operator, the local agents and the control plane.
func (l *Local) Stop() {
	if l.stop != nil {
		l.stop()
		<-l.errc
		l.stop = nil
	}
	if l.op != nil {
		l.op.Close()
	}
	local.StopAll(filepath.Join(l.Dir, "workspaces"))
	if l.CP != nil {
		l.say("stopping the control plane")
		_ = l.CP.Stop()
		l.CP = nil
	}
}

// sampleRepo creates a bare repository with the sample program on main and a
// working clone beside it, and returns the bare repository's URL.
func sampleRepo(ctx context.Context, dir string) (string, error) {
	bare, work := filepath.Join(dir, "remote.git"), filepath.Join(dir, "work")
	git := func(in string, args ...string) error {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = in
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=stackflow-dev", "GIT_AUTHOR_EMAIL=dev@stackflow.invalid",
			"GIT_COMMITTER_NAME=stackflow-dev", "GIT_COMMITTER_EMAIL=dev@stackflow.invalid")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, b)
		}
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := git(dir, "init", "-q", "--bare", "-b", "main", bare); err != nil {
		return "", err
	}
	if err := git(dir, "init", "-q", "-b", "main", work); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(work, "Pulumi.yaml"), []byte(SampleProgram), 0o644); err != nil {
		return "", err
	}
	for _, args := range [][]string{{"add", "-A"}, {"commit", "-q", "-m", "Sample program"}, {"remote", "add", "origin", bare}, {"push", "-q", "origin", "main"}} {
		if err := git(work, args...); err != nil {
			return "", err
		}
	}
	return "file://" + bare, nil
}

func sampleStack(repoURL string) *pulumiv1.Stack {
	return &pulumiv1.Stack{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello"},
		Spec: pulumiv1.StackSpec{
			Stack:     "dev",
			GitSource: &pulumiv1.GitSource{ProjectRepo: repoURL, Branch: "main"},
			Config:    map[string]apiextensionsv1.JSON{"greeting": {Raw: []byte(`"Hello from Stackflow"`)}},
		},
	}
}

// watchStack prints the sample Stack's Ready condition as it changes.
func watchStack(ctx context.Context, c client.Client, s *pulumiv1.Stack, say func(string, ...any)) {
	last := ""
	for ctx.Err() == nil {
		var cur pulumiv1.Stack
		if err := c.Get(ctx, client.ObjectKeyFromObject(s), &cur); err == nil {
			if r := conditions.Current(&cur, cur.Status.Conditions, pulumiv1.ReadyCondition); r != nil {
				line := fmt.Sprintf("Stack %s: Ready=%s %s: %s", cur.Name, r.Status, r.Reason, r.Message)
				if line != last {
					say("%s", line)
					last = line
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func waitReady(ctx context.Context, c client.Client, s *pulumiv1.Stack, timeout time.Duration, record string, say func(string, ...any)) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var cur pulumiv1.Stack
		if err := c.Get(ctx, client.ObjectKeyFromObject(s), &cur); err == nil && conditions.IsTrue(&cur, cur.Status.Conditions, pulumiv1.ReadyCondition) {
			content, err := os.ReadFile(record)
			if err != nil {
				return fmt.Errorf("stack ready but its record is missing: %w", err)
			}
			say("sample Stack Ready at %s; record %s holds %q", cur.Status.LastUpdate.LastSuccessfulCommit, record, content)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return errors.New("the sample Stack did not become Ready in time")
}
