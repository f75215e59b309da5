package controller

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

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

// SetupWithManager registers the controller.
func (r *WorkspaceReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&autov1alpha1.Workspace{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&appsv1.StatefulSet{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Workers, 1)})
	if r.WatchPods {
		// Pods are owned by the StatefulSet, not the Workspace: map them by
		// their workspace label.
		b = b.Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(workspaceOfPod))
	}
	return b.Complete(quietConflicts(r))
}

// workspaceOfPod is the Workspace a workspace pod runs.
func workspaceOfPod(_ context.Context, obj client.Object) []reconcile.Request {
	l := obj.GetLabels()
	name := l[pod.LabelWorkspaceName]
	if name == "" || l[pod.LabelManagedBy] != pod.LabelManagedByValue {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}

// RBAC: each verb the role grants is justified in
// operator/test/rbac/justification_test.go; add the reason there with a marker.
// Workspaces: cached reads, the finalizer (Update), the one status patch;
// finalizers/update lets the token Secret, StatefulSet and Service carry
// blockOwnerDeletion owner references. The agent token Secret is read by name
// (never cached: see operator.uncachedSecrets) and created once.
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=workspaces,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=workspaces/status,verbs=patch
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=workspaces/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile converges one Workspace.
func (r *WorkspaceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	ws := &autov1alpha1.Workspace{}
	if err := r.Get(ctx, req.NamespacedName, ws); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	base := ws.DeepCopy()
	defer func() {
		// The event follows the stored change: a reconcile that worked from
		// a stale copy writes nothing and says nothing.
		if !writeStatusLocked(ctx, r.Client, base, ws, !equality.Semantic.DeepEqual(base.Status, ws.Status), &retErr) {
			if retErr != nil {
				// The error's backoff decides the retry: controller-runtime
				// ignores (and warns about) a result beside an error.
				result = ctrl.Result{}
			}
			return
		}
		if typ, reason, msg, ok := workspaceEvent(base.Status.Conditions, ws.Status.Conditions); ok {
			r.Recorder.Event(ws, typ, reason, msg)
		}
	}()

	if !ws.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, ws)
	}
	if controllerutil.AddFinalizer(ws, workspaceFinalizer) {
		if err := r.Update(ctx, ws); err != nil {
			return ctrl.Result{}, err
		}
	}
	token, err := r.reconcileToken(ctx, ws)
	var waiting errWaitingTokenSecret
	if errors.As(err, &waiting) {
		setCondition(&ws.Status.Conditions, ws.Generation, autov1alpha1.WorkspaceReady, metav1.ConditionFalse,
			autov1alpha1.WorkspaceReasonInitializing, waiting.Error())
		return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	st, err := r.Runtime.Ensure(ctx, ws, token)
	if err != nil {
		return ctrl.Result{}, err
	}
	return r.reconcileAgent(ctx, ws, st, token)
}

func (r *WorkspaceReconciler) reconcileDelete(ctx context.Context, ws *autov1alpha1.Workspace) error {
	setCondition(&ws.Status.Conditions, ws.Generation, autov1alpha1.WorkspaceReady, metav1.ConditionFalse, autov1alpha1.WorkspaceReasonDeleting, "the workspace is being deleted")
	if err := r.Runtime.Remove(ctx, ws); err != nil {
		return fmt.Errorf("remove workspace agent: %w", err)
	}
	r.Agents.Forget(ws.Status.Address)
	r.applied.Delete(ws.UID)
	if controllerutil.RemoveFinalizer(ws, workspaceFinalizer) {
		return client.IgnoreNotFound(r.Update(ctx, ws))
	}
	return nil
}

// reconcileToken makes sure the agent's bearer token Secret exists and
// belongs to this Workspace (unless the operator authenticates with its own
// ServiceAccount token). Its name carries the Workspace's UID, so a
// recreated Workspace gets a new token; a Secret of that name the Workspace
// does not control (created by someone else) is never used.
func (r *WorkspaceReconciler) reconcileToken(ctx context.Context, ws *autov1alpha1.Workspace) (string, error) {
	if !r.Agents.WorkspaceTokens() {
		return "", nil
	}
	key := types.NamespacedName{Namespace: ws.Namespace, Name: workspace.TokenSecretName(ws)}
	var s corev1.Secret
	err := r.Get(ctx, key, &s)
	if err == nil {
		if owner := metav1.GetControllerOf(&s); owner == nil || owner.UID != ws.UID {
			return "", errWaitingTokenSecret{name: key.Name}
		}
		return string(s.Data[pod.TokenSecretKey]), nil
	}
	if !apierrors.IsNotFound(err) {
		return "", err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	s = corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: pod.Labels(ws.Name)},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{pod.TokenSecretKey: []byte(hex.EncodeToString(b))},
	}
	if err := controllerutil.SetControllerReference(ws, &s, r.Scheme()); err != nil {
		return "", err
	}
	if err := r.Create(ctx, &s); err != nil {
		return "", fmt.Errorf("create agent token secret: %w", err)
	}
	return string(s.Data[pod.TokenSecretKey]), nil
}

// errWaitingTokenSecret: the token Secret's name is taken by a Secret this
// Workspace does not control (an earlier Workspace's, not yet collected).
type errWaitingTokenSecret struct{ name string }

func (e errWaitingTokenSecret) Error() string {
	return fmt.Sprintf("agent token Secret %s is not controlled by this Workspace; "+
		"waiting for it to be deleted so that the operator issues the token", e.name)
}

// reconcileAgent reports the runtime's state and, once the agent serves,
// moves it to the spec's source revision in place and applies the stack
// configuration through it (never restarting it).
func (r *WorkspaceReconciler) reconcileAgent(ctx context.Context, ws *autov1alpha1.Workspace, st workspace.Status, token string) (ctrl.Result, error) {
	gen := ws.Generation
	conds := &ws.Status.Conditions
	switch {
	case st.Failed:
		reason := st.Reason
		if reason == "" {
			reason = autov1alpha1.WorkspaceReasonInstallationFailed
		}
		setCondition(conds, gen, autov1alpha1.WorkspaceReady, metav1.ConditionFalse, reason, st.Message)
		setCondition(conds, gen, autov1alpha1.WorkspaceStalled, metav1.ConditionTrue, reason, st.Message)
		// The runtime (or the kubelet) keeps retrying; look again then. Pod
		// changes also trigger a reconcile through the pod watch.
		return ctrl.Result{RequeueAfter: recheck(st, 30*time.Second)}, nil
	case !st.Ready && st.Reason != "":
		// Failing while Kubernetes retries: not ready, not stalled (yet).
		apimeta.RemoveStatusCondition(conds, autov1alpha1.WorkspaceStalled)
		setCondition(conds, gen, autov1alpha1.WorkspaceReady, metav1.ConditionFalse, st.Reason, st.Message)
		return ctrl.Result{RequeueAfter: recheck(st, 10*time.Second)}, nil
	case !st.Ready:
		apimeta.RemoveStatusCondition(conds, autov1alpha1.WorkspaceStalled)
		setCondition(conds, gen, autov1alpha1.WorkspaceReady, metav1.ConditionFalse, autov1alpha1.WorkspaceReasonInitializing, st.Message)
		// Waiting for the agent to fetch and install; pod readiness also
		// triggers a reconcile through the StatefulSet watch.
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	}
	apimeta.RemoveStatusCondition(conds, autov1alpha1.WorkspaceStalled)
	if ws.Status.Address != "" && ws.Status.Address != st.Address {
		r.Agents.Forget(ws.Status.Address)
	}
	ws.Status.Address = st.Address
	agent, err := r.Agents.Get(st.Address, token)
	if err != nil {
		return ctrl.Result{}, err
	}
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := agent.Info(callCtx, &agentv1.InfoRequest{})
	if err != nil {
		setCondition(conds, gen, autov1alpha1.WorkspaceReady, metav1.ConditionFalse, autov1alpha1.WorkspaceReasonConnectionFailed, fmt.Sprintf("agent at %s does not answer: %v", st.Address, status.Convert(err).Message()))
		// The agent may be restarting; try again shortly.
		return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
	}
	ws.Status.PulumiVersion = info.PulumiVersion
	if done, res, err := r.reconcileCheckout(ctx, ws, agent, info); !done {
		return res, err
	}

	hash := stacksHash(ws.Spec.Stacks)
	applied := appliedConfig{instance: info.Instance, checkouts: info.Checkouts, hash: hash}
	if prev, ok := r.applied.Load(ws.UID); !ok || prev.(appliedConfig) != applied {
		if done, res, err := r.reconcileConfiguration(ctx, ws, agent); !done {
			return res, err
		}
		r.applied.Store(ws.UID, applied)
		log.FromContext(ctx).Info("Applied stack configuration", "stacks", len(ws.Spec.Stacks), "agent", info.Instance)
	}
	setCondition(conds, gen, autov1alpha1.WorkspaceReady, metav1.ConditionTrue, autov1alpha1.WorkspaceReasonRunning, fmt.Sprintf("agent ready at %s (pulumi %s, revision %s)", st.Address, info.PulumiVersion, info.Revision))
	ws.Status.ObservedGeneration = gen
	// Look again later: an agent that restarted lost its configuration and
	// must be configured again.
	return ctrl.Result{RequeueAfter: 30 * time.Second}, nil
}

// recheck is st.RecheckAfter when the runtime gave one (at most def), else def.
func recheck(st workspace.Status, def time.Duration) time.Duration {
	if st.RecheckAfter > 0 && st.RecheckAfter < def {
		return st.RecheckAfter
	}
	return def
}

// workspaceEvent is the event a change of the Workspace's conditions calls
// for: a Warning when it starts failing, fails for another reason, or stalls;
// a Normal one when it is running again after a failure. Nothing when the
// reason and stalled-ness are unchanged, so a failure that persists through
// many reconciles is reported once.
func workspaceEvent(before, after []metav1.Condition) (typ, reason, msg string, ok bool) {
	was, wasStalled, wasFailing := workspaceState(before)
	now, stalled, failing := workspaceState(after)
	switch {
	case failing && (!wasFailing || now.Reason != was.Reason || stalled != wasStalled):
		return corev1.EventTypeWarning, now.Reason, now.Message, true
	case wasFailing && now != nil && now.Status == metav1.ConditionTrue:
		return corev1.EventTypeNormal, now.Reason, now.Message, true
	}
	return "", "", "", false
}

// workspaceState is the Ready condition (nil when absent), whether the
// Workspace is stalled, and whether Ready says it fails.
func workspaceState(conds []metav1.Condition) (ready *metav1.Condition, stalled, failing bool) {
	ready = apimeta.FindStatusCondition(conds, autov1alpha1.WorkspaceReady)
	stalled = apimeta.IsStatusConditionTrue(conds, autov1alpha1.WorkspaceStalled)
	if ready == nil || ready.Status == metav1.ConditionTrue {
		return ready, stalled, false
	}
	switch ready.Reason {
	case autov1alpha1.WorkspaceReasonInitializing, autov1alpha1.WorkspaceReasonDeleting:
		return ready, stalled, false
	}
	return ready, stalled, true
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
