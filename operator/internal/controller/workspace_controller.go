package controller

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/agentclient"
	"github.com/stackflow-io/stackflow/operator/internal/workspace"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

// workspaceFinalizer lets the runtime stop the agent before a Workspace goes.
const workspaceFinalizer = "auto.pulumi.com/workspace-runtime"

// WorkspaceReconciler runs workspace agents and applies stack configuration.
type WorkspaceReconciler struct {
	client.Client
	Recorder record.EventRecorder
	Runtime  workspace.Runtime
	Agents   *agentclient.Pool
	// Workers is the controller's concurrency.
	Workers int
	// WatchPods reconciles a Workspace when its pod changes (the pod runtime:
	// the pod's status says why a workspace fails).
	WatchPods bool

	// applied remembers, per Workspace UID, which agent instance holds which
	// stack configuration, so configuration is applied once per change or
	// agent restart, not on every reconcile. It only saves calls: a
	// restarted operator, which remembers nothing, applies it again and the
	// agent (which knows what it holds) accepts the same configuration at
	// once, even while an update runs.
	applied sync.Map // types.UID → appliedConfig
	// Tokens remembers agent tokens (shared with the Update controller);
	// nil reads the token Secret on every reconcile.
	Tokens *AgentTokens

	// Now is the clock deciding checkout retries; nil means time.Now.
	Now func() time.Time
	// SSHKnownHosts holds the operator's known_hosts lines
	// (--ssh-known-hosts), sent with the credentials of a checkout that
	// uses an SSH key and names no knownHosts of its own.
	SSHKnownHosts string
}

// appliedConfig is a stack configuration (hash) applied to an agent
// (instance) at its checkouts-th checkout: a checkout clears it.
type appliedConfig struct {
	instance  string
	checkouts int64
	hash      string
}

func (r *WorkspaceReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// workspaceScope is what one reconcile of a Workspace has learned so far.
type workspaceScope struct {
	ws *autov1alpha1.Workspace
	// token is the agent's bearer token ("" with the operator's own).
	token string
	// st is the runtime's account of the agent.
	st workspace.Status
	// agent and info: the serving agent and what it says of itself.
	agent agentv1.AgentClient
	info  *agentv1.InfoResponse
}

// Reconcile converges one Workspace: its agent's token, the runtime, the
// agent's revision (checked out in place) and its stack configuration;
// the finisher writes the status.
func (r *WorkspaceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ws := &autov1alpha1.Workspace{}
	if err := r.Get(ctx, req.NamespacedName, ws); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	base, sc := ws.DeepCopy(), &workspaceScope{ws: ws}
	steps := []step[*workspaceScope]{
		r.reconcileFinalizer, r.reconcileToken, r.reconcileRuntime, r.reconcileAgent, r.reconcileCheckout, r.reconcileConfiguration,
		r.reconcileReady,
	}
	if !ws.DeletionTimestamp.IsZero() {
		steps = []step[*workspaceScope]{r.reconcileDelete}
	}
	return r.finisher().finish(ctx, base, ws, runSteps(ctx, sc, steps...))
}

func (r *WorkspaceReconciler) reconcileDelete(ctx context.Context, sc *workspaceScope) error {
	ws := sc.ws
	if err := r.Runtime.Remove(ctx, ws); err != nil {
		return fmt.Errorf("remove workspace agent: %w", err)
	}
	r.Agents.Forget(ws.Status.Address)
	r.applied.Delete(ws.UID)
	r.Tokens.forget(ws.UID)
	if controllerutil.RemoveFinalizer(ws, workspaceFinalizer) {
		if err := r.Update(ctx, ws); client.IgnoreNotFound(err) != nil {
			return err
		}
		return errGone
	}
	// Other finalizers keep it.
	return &waitingError{reason: autov1alpha1.WorkspaceReasonDeleting, msg: workspaceDeletingMessage}
}

const workspaceDeletingMessage = "the workspace is being deleted"

func (r *WorkspaceReconciler) reconcileFinalizer(ctx context.Context, sc *workspaceScope) error {
	if controllerutil.AddFinalizer(sc.ws, workspaceFinalizer) {
		return r.Update(ctx, sc.ws)
	}
	return nil
}

// reconcileToken makes sure the agent's bearer token Secret exists and
// belongs to this Workspace (unless the operator authenticates with its own
// ServiceAccount token). Its name carries the Workspace's UID, so a
// recreated Workspace gets a new token; a Secret of that name the Workspace
// does not control (created by someone else, or an earlier Workspace's not
// yet collected) is never used: the Workspace waits for it to go.
func (r *WorkspaceReconciler) reconcileToken(ctx context.Context, sc *workspaceScope) error {
	ws := sc.ws
	if !r.Agents.WorkspaceTokens() {
		return nil
	}
	if t, ok := r.Tokens.get(ws.UID); ok {
		sc.token = t
		return nil
	}
	key := types.NamespacedName{Namespace: ws.Namespace, Name: workspace.TokenSecretName(ws)}
	var s corev1.Secret
	err := r.Get(ctx, key, &s)
	if err == nil {
		if owner := metav1.GetControllerOf(&s); owner == nil || owner.UID != ws.UID {
			return &waitingError{reason: autov1alpha1.WorkspaceReasonInitializing, requeue: 5 * time.Second,
				msg: fmt.Sprintf("agent token Secret %s is not controlled by this Workspace; "+
					"waiting for it to be deleted so that the operator issues the token", key.Name)}
		}
		sc.token = string(s.Data[pod.TokenSecretKey])
		r.Tokens.put(ws.UID, sc.token)
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	s = corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: pod.Labels(ws.Name)},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{pod.TokenSecretKey: []byte(hex.EncodeToString(b))},
	}
	if err := controllerutil.SetControllerReference(ws, &s, r.Scheme()); err != nil {
		return err
	}
	if err := r.Create(ctx, &s); err != nil {
		return fmt.Errorf("create agent token secret: %w", err)
	}
	sc.token = string(s.Data[pod.TokenSecretKey])
	r.Tokens.put(ws.UID, sc.token)
	return nil
}

// reconcileRuntime makes the agent exist for the spec and goes on once the
// runtime reports it serving.
func (r *WorkspaceReconciler) reconcileRuntime(ctx context.Context, sc *workspaceScope) error {
	st, err := r.Runtime.Ensure(ctx, sc.ws, sc.token)
	if err != nil {
		return err
	}
	sc.st = st
	if st.Failed || st.Reason != "" {
		// Failing (a deleted token Secret the pod cannot mount, say): read
		// the token Secret again next time, recreating it if it is gone.
		r.Tokens.forget(sc.ws.UID)
	}
	switch {
	case st.Failed:
		// The runtime (or the kubelet) keeps retrying; look again then. Pod
		// changes also trigger a reconcile through the pod watch.
		return &stallingError{reason: or(st.Reason, autov1alpha1.WorkspaceReasonInstallationFailed), msg: st.Message, requeue: recheck(st, 30*time.Second)}
	case !st.Ready && st.Reason != "":
		// Failing while Kubernetes retries: not ready, not stalled (yet).
		return &waitingError{reason: st.Reason, msg: st.Message, requeue: recheck(st, 10*time.Second)}
	case !st.Ready:
		// Waiting for the agent to fetch and install. Where pods are watched
		// (the pod runtime), pod and StatefulSet changes trigger the next
		// reconcile and the requeue is only a safety net: looking every 2 s
		// at thousands of starting (or unschedulable) workspaces is most of
		// a fleet's steady API load. The local runtime is not watched.
		return &waitingError{reason: autov1alpha1.WorkspaceReasonInitializing, msg: st.Message, requeue: r.startingRecheck()}
	}
	return nil
}

// startingRecheck is when a Workspace whose agent is starting is looked at
// again without an event.
func (r *WorkspaceReconciler) startingRecheck() time.Duration {
	if r.WatchPods {
		return 30 * time.Second
	}
	return 2 * time.Second
}

// reconcileAgent connects to the serving agent and asks what it holds.
func (r *WorkspaceReconciler) reconcileAgent(ctx context.Context, sc *workspaceScope) error {
	ws, st := sc.ws, sc.st
	if ws.Status.Address != "" && ws.Status.Address != st.Address {
		r.Agents.Forget(ws.Status.Address)
	}
	ws.Status.Address = st.Address
	agent, err := r.Agents.Get(st.Address, sc.token)
	if err != nil {
		return err
	}
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := agent.Info(callCtx, &agentv1.InfoRequest{})
	if status.Code(err) == codes.Unauthenticated {
		// The agent holds another token than the one remembered: read
		// the Secret again.
		r.Tokens.forget(ws.UID)
	}
	if err != nil {
		// The agent may be restarting; try again shortly.
		return &waitingError{reason: autov1alpha1.WorkspaceReasonConnectionFailed, requeue: 5 * time.Second,
			msg: fmt.Sprintf("agent at %s does not answer: %v", st.Address, status.Convert(err).Message())}
	}
	ws.Status.PulumiVersion = info.PulumiVersion
	sc.agent, sc.info = agent, info
	return nil
}

// reconcileReady: the agent serves the spec's revision and configuration.
// It is looked at again later: an agent that restarted lost its
// configuration and must be configured again.
func (r *WorkspaceReconciler) reconcileReady(_ context.Context, sc *workspaceScope) error {
	return &upToDateOutcome{requeue: 30 * time.Second,
		msg: fmt.Sprintf("agent ready at %s (pulumi %s, revision %s)", sc.st.Address, sc.info.PulumiVersion, sc.info.Revision)}
}

// recheck is st.RecheckAfter when the runtime gave one (at most def), else def.
func recheck(st workspace.Status, def time.Duration) time.Duration {
	if st.RecheckAfter > 0 && st.RecheckAfter < def {
		return st.RecheckAfter
	}
	return def
}

func stacksHash(stacks []autov1alpha1.WorkspaceStack) string {
	b, _ := json.Marshal(stacks)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// selectStack applies one WorkspaceStack through the agent.
func selectStack(ctx context.Context, agent agentv1.AgentClient, s autov1alpha1.WorkspaceStack) error {
	req := &agentv1.SelectStackRequest{StackName: s.Name, Create: s.Create == nil || *s.Create, Environment: s.Environment}
	if s.SecretsProvider != nil {
		req.SecretsProvider = *s.SecretsProvider
	}
	for _, c := range s.Config {
		item := &agentv1.ConfigItem{Key: c.Key, Path: c.Path != nil && *c.Path, Secret: c.Secret != nil && *c.Secret}
		switch {
		case c.Value != nil:
			item.Source = &agentv1.ConfigItem_ValueJson{ValueJson: string(c.Value.Raw)}
		case c.ValueFrom != nil && c.ValueFrom.Env != "":
			item.Source = &agentv1.ConfigItem_ValueFromEnv{ValueFromEnv: c.ValueFrom.Env}
			item.Json = c.ValueFrom.JSON != nil && *c.ValueFrom.JSON
		case c.ValueFrom != nil && c.ValueFrom.Path != "":
			item.Source = &agentv1.ConfigItem_ValueFromFile{ValueFromFile: c.ValueFrom.Path}
			item.Json = c.ValueFrom.JSON != nil && *c.ValueFrom.JSON
		default:
			return status.Errorf(codes.InvalidArgument, "config %s has neither value nor valueFrom", c.Key)
		}
		req.Config = append(req.Config, item)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	_, err := agent.SelectStack(ctx, req)
	return err
}
