// Package local is the local workspace runtime: each Workspace's agent runs as a
// child process of the operator with its own working directory, environment and
// loopback port. It is a development runtime (`make run`, end-to-end tests on a
// machine without a kubelet); clusters use the pod runtime.
//
// Agent processes outlive an operator restart: their pid, spec hash and address
// are kept in a state file, and a restarted operator adopts a live agent whose
// spec is unchanged, so Updates running in it are re-attached.
//
// It imports the operator API and controller-runtime's client.
package local

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/workspace"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
)

// Runtime runs agents as local processes.
type Runtime struct {
	// Root holds one directory per workspace: <root>/<namespace>/<name>.
	Root string
	// AgentBinary is the agent executable.
	AgentBinary string
	// PulumiRoot holds bin/pulumi for the agents; empty means PATH.
	PulumiRoot string
	// Env is added to the operator's environment for every agent (e.g.
	// PULUMI_BACKEND_URL, PATH with the language hosts).
	Env map[string]string
	// Client reads the Secrets and ConfigMaps that env, envFrom and git
	// credentials refer to.
	Client client.Reader
	// RestartBackoff is how long a failed agent stays down before it is
	// started again; default 30s.
	RestartBackoff time.Duration
	// SSHKnownHosts holds the operator's known_hosts lines
	// (--ssh-known-hosts), given to agents that clone with an SSH key and
	// no knownHosts of their own.
	SSHKnownHosts string
	// AgentSettings are the operator's settings every agent gets as flags.
	pod.AgentSettings

	mu sync.Mutex
}

var _ workspace.Runtime = (*Runtime)(nil)

// state is kept in <dir>/agent.json.
type state struct {
	PID  int    `json:"pid"`
	Hash string `json:"hash"`
	// Started is when the process was started.
	Started time.Time `json:"started"`
}

func (r *Runtime) dir(ws *autov1alpha1.Workspace) string {
	return filepath.Join(r.Root, ws.Namespace, ws.Name)
}

// Ensure starts, adopts or replaces the workspace's agent.
func (r *Runtime) Ensure(ctx context.Context, ws *autov1alpha1.Workspace, token string) (workspace.Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	dir := r.dir(ws)
	own, creds, args, secrets, err := r.command(ctx, ws, dir, token)
	if err != nil {
		return workspace.Status{Failed: true, Message: err.Error()}, nil
	}
	hash := agentHash(ws, own, args)
	st, _ := readState(dir)
	if st != nil && st.Hash == hash {
		if agentAlive(st.PID) {
			addr, err := os.ReadFile(filepath.Join(dir, "address"))
			if err != nil {
				if failed, ok := exitStatus(filepath.Join(dir, previousTerminationFile), "", secrets); ok {
					// Restarted after a failure: still failed until it serves,
					// so the Workspace does not flap at each restart.
					return failed, nil
				}
				return workspace.Status{Message: "agent is fetching the program and installing its dependencies"}, nil
			}
			return workspace.Status{Ready: true, Address: string(addr), Message: "agent running (pid " + fmt.Sprint(st.PID) + ")"}, nil
		}
		backoff := r.RestartBackoff
		if backoff == 0 {
			backoff = 30 * time.Second
		}
		if time.Since(st.Started) < backoff {
			failed, _ := exitStatus(filepath.Join(dir, terminationFile), filepath.Join(dir, "agent.log"), secrets)
			return failed, nil
		}
	}
	if st != nil {
		stop(st.PID)
	}
	// command resolved which definition of a name wins; creds and own
	// share no name, and both win over the operator's own environment.
	if err := r.start(dir, slices.Concat(os.Environ(), creds, own), args, hash); err != nil {
		return workspace.Status{}, err
	}
	return workspace.Status{Message: "agent started; fetching the program"}, nil
}

// Remove stops the agent and deletes its directory.
func (r *Runtime) Remove(_ context.Context, ws *autov1alpha1.Workspace) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	dir := r.dir(ws)
	if st, _ := readState(dir); st != nil {
		stop(st.PID)
	}
	return os.RemoveAll(dir)
}

// Files in a workspace directory: the agent writes why it stopped to
// terminationFile; a restart moves it to previousTerminationFile.
const (
	terminationFile         = "termination-log"
	previousTerminationFile = "termination-log.previous"
)

// exitStatus is the Failed status of an agent that stopped, from what it left
// in term (its classified last word), else the last error of its log (when
// logPath is set). ok is false when neither says anything.
func exitStatus(term, logPath string, secrets []string) (workspace.Status, bool) {
	if b, err := os.ReadFile(term); err == nil {
		if line := pod.LastLine(string(b)); line != "" {
			reason, msg := pod.SplitAgentReason(line)
			if reason == "" {
				msg = "agent exited: " + msg
			}
			return workspace.Status{Failed: true, Reason: reason, Message: workspace.Redact(msg, secrets)}, true
		}
	}
	if logPath == "" {
		return workspace.Status{}, false
	}
	return workspace.Status{Failed: true, Message: workspace.Redact("agent exited: "+lastError(logPath), secrets)}, true
}

func (r *Runtime) start(dir string, env, args []string, hash string) error {
	for _, sub := range []string{"address", "agent.json", previousTerminationFile} {
		_ = os.Remove(filepath.Join(dir, sub))
	}
	// Keep the last failure (if the agent left one) for the restart's status.
	_ = os.Rename(filepath.Join(dir, terminationFile), filepath.Join(dir, previousTerminationFile))
	if err := os.RemoveAll(filepath.Join(dir, "work")); err != nil {
		return fmt.Errorf("clear workspace directory: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create workspace directory: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(r.AgentBinary, args...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: the agent survives an operator restart, and
	// stopping it stops the pulumi processes it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start agent %s: %w", r.AgentBinary, err)
	}
	go func() { _ = cmd.Wait() }() // reap it while this operator runs
	b, _ := json.Marshal(state{PID: cmd.Process.Pid, Hash: hash, Started: time.Now()})
	return os.WriteFile(filepath.Join(dir, "agent.json"), b, 0o644)
}

func readState(dir string) (*state, error) {
	b, err := os.ReadFile(filepath.Join(dir, "agent.json"))
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// agentAlive: pid runs an agent (not a reused pid, not a zombie).
func agentAlive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err == nil {
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
			return false
		}
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err != nil || bytes.Contains(cmdline, []byte("serve"))
}

// stop ends an agent's process group: SIGTERM (the agent cancels its runs),
// then SIGKILL after a grace period.
func stop(pid int) {
	if !agentAlive(pid) {
		return
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if !agentAlive(pid) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// lastError returns the agent log's last error line.
func lastError(logPath string) string {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return "no log"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "error") || strings.Contains(lines[i], "Agent stopped") {
			return strings.TrimSpace(lines[i])
		}
	}
	return lines[len(lines)-1]
}

func specHash(args, env []string) string {
	h := sha256.New()
	for _, a := range args {
		h.Write([]byte(a))
		h.Write([]byte{0})
	}
	h.Write([]byte{1})
	for _, e := range env {
		h.Write([]byte(e))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// agentHash identifies the agent process the spec asks for, from its
// arguments and own variables (command). A new source revision alone keeps a
// live agent: it checks the revision out in place when the Workspace
// controller asks. So does a new value of a git credential: the controller
// sends the current ones with each Checkout, so only the references to them
// count, as in the pod runtime's template.
func agentHash(ws *autov1alpha1.Workspace, own, args []string) string {
	return specHash(pod.WithoutRevision(args), slices.Concat(own, []string{gitAuthRefs(ws)}))
}

// gitAuthRefs identifies the Secret references of the workspace's git
// credentials (not their values).
func gitAuthRefs(ws *autov1alpha1.Workspace) string {
	if ws.Spec.Git == nil || ws.Spec.Git.Auth == nil {
		return "git-auth="
	}
	b, _ := json.Marshal(ws.Spec.Git.Auth)
	return "git-auth=" + string(b)
}

// command builds the agent's arguments and environment from the spec: own
// holds the variables this runtime sets but the git credentials, which are
// in creds (the values of their Secrets now, for the agent's first fetch).
// Only the spec's source, env and log level matter: spec.stacks is applied
// through the agent API and never restarts it.
// The secret values it returns (the token, credentials, values read from
// Secrets) are masked in the statuses it reports.
func (r *Runtime) command(ctx context.Context, ws *autov1alpha1.Workspace, dir, token string) (own, creds, args, secrets []string, err error) {
	args = []string{"serve", "--workdir=" + filepath.Join(dir, "work"), "--listen=127.0.0.1:0",
		"--address-file=" + filepath.Join(dir, "address"), "--auth=token",
		"--termination-message-path=" + filepath.Join(dir, terminationFile)}
	secrets = []string{token}
	if r.PulumiRoot != "" {
		args = append(args, "--pulumi-root="+r.PulumiRoot)
	}
	args = append(args, r.AgentSettings.Args()...)
	extra := map[string]string{}
	spec := ws.Spec
	switch {
	case spec.Git != nil:
		args = append(args, "--git-url="+spec.Git.URL, "--git-ref="+spec.Git.Ref)
		if spec.Git.Dir != "" {
			args = append(args, "--dir="+spec.Git.Dir)
		}
		if spec.Git.Shallow {
			args = append(args, "--git-shallow")
		}
		c, err := workspace.GitCredentials(ctx, r.Client, ws, r.SSHKnownHosts)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		for k, v := range c.Env() {
			creds = append(creds, k+"="+v)
		}
		sort.Strings(creds)
		secrets = append(secrets, c.Secrets()...)
	case spec.Flux != nil:
		args = append(args, "--artifact-url="+spec.Flux.Url, "--artifact-digest="+spec.Flux.Digest)
		if spec.Flux.Dir != "" {
			args = append(args, "--dir="+spec.Flux.Dir)
		}
	case spec.Local != nil:
		args = append(args, "--local-dir="+spec.Local.Dir)
	default:
		return nil, nil, nil, nil, errors.New("no program source: set spec.git, spec.flux or spec.local")
	}
	if spec.PulumiLogVerbosity > 0 {
		args = append(args, fmt.Sprintf("--pulumi-log-level=%d", spec.PulumiLogVerbosity))
	}
	var secretNames []string
	for _, from := range spec.EnvFrom {
		data, err := r.envFrom(ctx, ws.Namespace, from)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		for k, v := range data {
			extra[from.Prefix+k] = v
			if from.SecretRef != nil {
				secrets = append(secrets, v)
				secretNames = append(secretNames, from.Prefix+k)
			}
		}
	}
	for _, e := range spec.Env {
		if e.Name == pod.TokenEnvVar {
			return nil, nil, nil, nil, fmt.Errorf("spec.env: %s is reserved for the agent's token", pod.TokenEnvVar)
		}
		v, err := r.envValue(ctx, ws.Namespace, e)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		extra[e.Name] = v
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			secrets = append(secrets, v)
			secretNames = append(secretNames, e.Name)
		}
	}
	if len(secretNames) > 0 {
		// The agent redacts the values of these variables in what it
		// reports and logs.
		sort.Strings(secretNames)
		extra[pod.SecretEnvNamesVar] = strings.Join(secretNames, ",")
	}
	// Precedence as in a workspace pod, whose container lists the git
	// credentials in env, above envFrom: envFrom < git credentials <
	// spec.env, and the agent's token above all (spec.env may not name it).
	creds = slices.DeleteFunc(creds, func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		if slices.ContainsFunc(spec.Env, func(e corev1.EnvVar) bool { return e.Name == name }) {
			return true
		}
		delete(extra, name) // an envFrom variable of the same name
		return false
	})
	extra[pod.TokenEnvVar] = token
	// own holds the variables this runtime sets, sorted: they (not the
	// operator's own environment) decide whether a running agent is current.
	for k, v := range r.Env {
		if _, set := extra[k]; !set {
			own = append(own, k+"="+v)
		}
	}
	for k, v := range extra {
		own = append(own, k+"="+v)
	}
	sort.Strings(own)
	return own, creds, args, secrets, nil
}

// The local runtime reads the Secrets and ConfigMaps of the workspace's env
// by name from the API server.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get

func (r *Runtime) envValue(ctx context.Context, ns string, e corev1.EnvVar) (string, error) {
	if e.ValueFrom == nil {
		return e.Value, nil
	}
	switch {
	case e.ValueFrom.SecretKeyRef != nil:
		v, err := workspace.SecretKey(ctx, r.Client, ns, e.ValueFrom.SecretKeyRef)
		if err != nil {
			return "", fmt.Errorf("env %s: %w", e.Name, err)
		}
		return v, nil
	case e.ValueFrom.ConfigMapKeyRef != nil:
		ref := e.ValueFrom.ConfigMapKeyRef
		var cm corev1.ConfigMap
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, &cm); err != nil {
			return "", fmt.Errorf("env %s: configmap %s: %w", e.Name, ref.Name, err)
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			return "", fmt.Errorf("env %s: configmap %s has no key %s", e.Name, ref.Name, ref.Key)
		}
		return v, nil
	}
	return "", fmt.Errorf("env %s: only value, secretKeyRef and configMapKeyRef are supported by the local runtime", e.Name)
}

func (r *Runtime) envFrom(ctx context.Context, ns string, from corev1.EnvFromSource) (map[string]string, error) {
	out := map[string]string{}
	switch {
	case from.SecretRef != nil:
		var s corev1.Secret
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: from.SecretRef.Name}, &s); err != nil {
			return nil, fmt.Errorf("envFrom secret %s: %w", from.SecretRef.Name, err)
		}
		for k, v := range s.Data {
			out[k] = string(v)
		}
	case from.ConfigMapRef != nil:
		var cm corev1.ConfigMap
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: from.ConfigMapRef.Name}, &cm); err != nil {
			return nil, fmt.Errorf("envFrom configmap %s: %w", from.ConfigMapRef.Name, err)
		}
		for k, v := range cm.Data {
			out[k] = v
		}
	}
	return out, nil
}

// StopAll stops every agent recorded under root (all workspaces of a
// runtime), for a development run or a test that ends.
func StopAll(root string) {
	files, _ := filepath.Glob(filepath.Join(root, "*", "*", "agent.json"))
	var wg sync.WaitGroup
	for _, f := range files {
		st, err := readState(filepath.Dir(f))
		if err != nil {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); stop(st.PID) }()
	}
	wg.Wait()
}
