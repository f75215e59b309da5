package controller

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/stackflow-io/stackflow/internal/conditions"
	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/agentclient"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
	"github.com/stackflow-io/stackflow/operator/internal/workspace"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

// DefaultUpdateTTL is how long a finished Update is kept when its spec does not
// say.
const DefaultUpdateTTL = 24 * time.Hour

// SecretsAnnotation on an outputs Secret lists, as a JSON array, the keys whose
// values are Pulumi secrets.
const SecretsAnnotation = "pulumi.com/secrets"

// workspaceNameField indexes Updates by spec.workspaceName.
const workspaceNameField = "spec.workspaceName"

// UpdateReconciler runs Updates: it starts the operation in the workspace agent
// and returns; a follower goroutine watches the run and wakes the reconciler
// when it ends. No worker is held while Pulumi runs.
type UpdateReconciler struct {
	client.Client
	Recorder record.EventRecorder
	Agents   *agentclient.Pool
	// Workers is the controller's concurrency; operations in flight are not
	// bounded by it.
	Workers int
	// Now is the clock (tests inject one); default time.Now.
	Now func() time.Time

	followers *followers
}

// SetupWithManager registers the controller, its Workspace watch and the
// follower channel.
func (r *UpdateReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Now == nil {
		r.Now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.followers = &followers{ctx: ctx, active: map[types.UID]bool{}, done: make(chan event.GenericEvent, 1024)}
	if err := mgr.Add(manager.RunnableFunc(func(mctx context.Context) error {
		<-mctx.Done()
		cancel()
		return nil
	})); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &autov1alpha1.Update{}, workspaceNameField, func(o client.Object) []string {
		return []string{o.(*autov1alpha1.Update).Spec.WorkspaceName}
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&autov1alpha1.Update{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&autov1alpha1.Workspace{}, handler.EnqueueRequestsFromMapFunc(r.updatesOfWorkspace)).
		WatchesRawSource(source.Channel(r.followers.done, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Workers, 1)}).
		Complete(quietConflicts(r))
}

// updatesOfWorkspace wakes the unfinished Updates of a Workspace that changed
// (became ready, or went away).
func (r *UpdateReconciler) updatesOfWorkspace(ctx context.Context, o client.Object) []reconcile.Request {
	var list autov1alpha1.UpdateList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{workspaceNameField: o.GetName()}); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, u := range list.Items {
		if !apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeComplete) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&u)})
		}
	}
	return reqs
}

// Updates: cached reads, deletion after their TTL, the one status patch;
// finalizers/update for the outputs Secret's blockOwnerDeletion reference.
// The outputs Secret is created once (immutable); the workspace token read by
// name.
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=updates,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=updates/status,verbs=patch
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=updates/finalizers,verbs=update
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=workspaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile converges one Update.
func (r *UpdateReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	u := &autov1alpha1.Update{}
	if err := r.Get(ctx, req.NamespacedName, u); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	base := u.DeepCopy()
	defer func() {
		writeStatus(ctx, r.Client, base, u, !equality.Semantic.DeepEqual(base.Status, u.Status), &retErr)
	}()
	complete := apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeComplete)
	if !u.DeletionTimestamp.IsZero() && (complete || len(u.Finalizers) == 0) {
		return ctrl.Result{}, nil
	}
	if complete {
		return r.reconcileTTL(ctx, u)
	}
	// An Update deleted while it runs (its Stack's result finalizer keeps it)
	// is still followed to its end, so its Stack records the result; one
	// deleted before it started never starts.
	if !u.DeletionTimestamp.IsZero() && !apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeProgressing) {
		r.finish(ctx, u, &agentv1.Operation{State: agentv1.OperationState_OPERATION_STATE_CANCELED, Message: "deleted before it started"})
		return ctrl.Result{}, nil
	}
	agent, waiting, err := r.reconcileWorkspace(ctx, u)
	if err != nil || waiting != nil {
		return ptrResult(waiting), err
	}
	if !apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeProgressing) {
		return r.reconcileStart(ctx, u, agent)
	}
	return r.reconcileProgress(ctx, u, agent)
}

func ptrResult(r *ctrl.Result) ctrl.Result {
	if r == nil {
		return ctrl.Result{}
	}
	return *r
}

// reconcileWorkspace finds the Update's workspace agent. It returns a result to
// wait with when the workspace is not ready, and ends a running Update as
// Aborted when its workspace is gone.
func (r *UpdateReconciler) reconcileWorkspace(ctx context.Context, u *autov1alpha1.Update) (agentv1.AgentClient, *ctrl.Result, error) {
	progressing := apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeProgressing)
	var ws autov1alpha1.Workspace
	err := r.Get(ctx, types.NamespacedName{Namespace: u.Namespace, Name: u.Spec.WorkspaceName}, &ws)
	if apierrors.IsNotFound(err) {
		if progressing {
			r.finish(ctx, u, &agentv1.Operation{State: agentv1.OperationState_OPERATION_STATE_UNKNOWN,
				Message: fmt.Sprintf("workspace %s was deleted while the update ran", u.Spec.WorkspaceName)})
			return nil, &ctrl.Result{}, nil
		}
		r.notStarted(u, fmt.Sprintf("waiting for workspace %s to exist", u.Spec.WorkspaceName))
		// The Workspace watch wakes this Update when it appears.
		return nil, &ctrl.Result{}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if rev, wsRev := updateRevision(u), workspaceCommit(&ws); !progressing && rev != "" && wsRev != "" && rev != wsRev {
		// The agent runs an Update at its commit only (startRequest), and
		// this workspace has moved on: it would wait forever. Ended, so that
		// its Stack starts one for the workspace's commit.
		r.finish(ctx, u, &agentv1.Operation{State: agentv1.OperationState_OPERATION_STATE_UNKNOWN,
			Message: fmt.Sprintf("not started: workspace %s is set to commit %s, not this update's %s", ws.Name, wsRev, rev)})
		return nil, &ctrl.Result{}, nil
	}
	ready := conditions.IsTrue(&ws, ws.Status.Conditions, autov1alpha1.WorkspaceReady) &&
		ws.Status.ObservedGeneration == ws.Generation && ws.Status.Address != ""
	if !ready && !progressing {
		r.notStarted(u, fmt.Sprintf("waiting for workspace %s to be ready", ws.Name))
		return nil, &ctrl.Result{}, nil
	}
	var token string
	if r.Agents.WorkspaceTokens() {
		var tok corev1.Secret
		if err := r.Get(ctx, types.NamespacedName{Namespace: u.Namespace, Name: workspace.TokenSecretName(&ws)}, &tok); err != nil {
			return nil, nil, fmt.Errorf("read workspace token: %w", err)
		}
		token = string(tok.Data[pod.TokenSecretKey])
	}
	agent, err := r.Agents.Get(ws.Status.Address, token)
	if err != nil {
		return nil, nil, err
	}
	return agent, nil, nil
}

func (r *UpdateReconciler) notStarted(u *autov1alpha1.Update, msg string) {
	setCondition(&u.Status.Conditions, u.Generation, autov1alpha1.UpdateConditionTypeProgressing, metav1.ConditionFalse, autov1alpha1.UpdateReasonNotStarted, msg)
	setCondition(&u.Status.Conditions, u.Generation, autov1alpha1.UpdateConditionTypeComplete, metav1.ConditionFalse, autov1alpha1.UpdateReasonNotStarted, msg)
}

// reconcileStart starts the operation and returns at once.
func (r *UpdateReconciler) reconcileStart(ctx context.Context, u *autov1alpha1.Update, agent agentv1.AgentClient) (ctrl.Result, error) {
	req := startRequest(u)
	callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	op, err := agent.StartOperation(callCtx, req)
	if status.Code(err) == codes.FailedPrecondition {
		// The workspace restarted and its configuration is being applied
		// again by the Workspace controller.
		r.notStarted(u, status.Convert(err).Message())
		return ctrl.Result{RequeueAfter: 3 * time.Second}, nil
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("start %s in workspace %s: %w", u.Spec.Type, u.Spec.WorkspaceName, err)
	}
	if op.State != agentv1.OperationState_OPERATION_STATE_RUNNING {
		r.finish(ctx, u, op)
		return r.reconcileTTL(ctx, u)
	}
	u.Status.StartTime = metav1.NewTime(time.Unix(0, op.StartTimeUnixNano))
	u.Status.ObservedGeneration = u.Generation
	msg := fmt.Sprintf("%s of stack %s running in workspace %s", u.Spec.Type, u.Spec.StackName, u.Spec.WorkspaceName)
	setCondition(&u.Status.Conditions, u.Generation, autov1alpha1.UpdateConditionTypeProgressing, metav1.ConditionTrue, autov1alpha1.UpdateReasonProgressing, msg)
	setCondition(&u.Status.Conditions, u.Generation, autov1alpha1.UpdateConditionTypeComplete, metav1.ConditionFalse, autov1alpha1.UpdateReasonProgressing, msg)
	r.Recorder.Event(u, corev1.EventTypeNormal, autov1alpha1.UpdateReasonProgressing, msg)
	log.FromContext(ctx).Info("Started operation", "type", u.Spec.Type, "stack", u.Spec.StackName)
	r.followers.follow(u, agent)
	// The follower wakes this Update when the run ends; the requeue is a safety
	// net should the follower's stream break unnoticed.
	return ctrl.Result{RequeueAfter: 2 * time.Minute}, nil
}

// reconcileProgress asks the agent about the run: still running (follow it),
// ended (record the result), or unknown to the agent (the workspace restarted:
// the run is gone, the Update is Aborted — never left Progressing).
func (r *UpdateReconciler) reconcileProgress(ctx context.Context, u *autov1alpha1.Update, agent agentv1.AgentClient) (ctrl.Result, error) {
	callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	op, err := agent.GetOperation(callCtx, &agentv1.GetOperationRequest{UpdateId: string(u.UID)})
	if err != nil {
		// The agent may be restarting; backoff applies, and once it answers
		// the run is found or reported unknown.
		return ctrl.Result{}, fmt.Errorf("ask workspace %s about the run: %w", u.Spec.WorkspaceName, err)
	}
	if op.State == agentv1.OperationState_OPERATION_STATE_RUNNING {
		r.followers.follow(u, agent)
		return ctrl.Result{RequeueAfter: 2 * time.Minute}, nil
	}
	r.finish(ctx, u, op)
	return r.reconcileTTL(ctx, u)
}

// finish records an ended run: conditions, times, message, changes, outputs.
func (r *UpdateReconciler) finish(ctx context.Context, u *autov1alpha1.Update, op *agentv1.Operation) {
	reason, result := autov1alpha1.UpdateReasonFailed, "failed"
	switch op.State {
	case agentv1.OperationState_OPERATION_STATE_SUCCEEDED:
		reason, result = autov1alpha1.UpdateReasonSucceeded, "succeeded"
	case agentv1.OperationState_OPERATION_STATE_CONFLICT:
		reason, result = autov1alpha1.UpdateReasonConflict, "conflict"
	case agentv1.OperationState_OPERATION_STATE_CANCELED:
		reason, result = autov1alpha1.UpdateReasonCanceled, "canceled"
	case agentv1.OperationState_OPERATION_STATE_STACK_NOT_FOUND:
		reason, result = autov1alpha1.UpdateReasonStackNotFound, "stack_not_found"
	case agentv1.OperationState_OPERATION_STATE_UNKNOWN:
		reason, result = autov1alpha1.UpdateReasonAborted, "aborted"
		if op.Message == "" {
			op.Message = fmt.Sprintf("the run is gone: workspace %s restarted or was replaced before the update reported a result", u.Spec.WorkspaceName)
		}
	}
	now := r.Now()
	if op.EndTimeUnixNano > 0 {
		u.Status.EndTime = metav1.NewTime(time.Unix(0, op.EndTimeUnixNano))
	} else {
		u.Status.EndTime = metav1.NewTime(now)
	}
	if u.Status.StartTime.IsZero() {
		if op.StartTimeUnixNano > 0 {
			u.Status.StartTime = metav1.NewTime(time.Unix(0, op.StartTimeUnixNano))
		} else {
			u.Status.StartTime = u.Status.EndTime
		}
	}
	msg := op.Message
	if len(op.Notices) > 0 {
		msg = strings.Join(op.Notices, "; ") + "; " + msg
		r.Recorder.Event(u, corev1.EventTypeWarning, "StaleLockRecovered", strings.Join(op.Notices, "; "))
	}
	u.Status.Message = msg
	u.Status.Permalink = op.Permalink
	u.Status.Changes = op.Changes
	u.Status.Resources = op.ChangedResources
	if len(u.Status.Resources) > 100 {
		u.Status.Resources = u.Status.Resources[:100]
	}
	u.Status.ObservedGeneration = u.Generation
	if op.State == agentv1.OperationState_OPERATION_STATE_SUCCEEDED && len(op.Outputs) > 0 {
		name, err := r.writeOutputs(ctx, u, op.Outputs)
		if err != nil {
			log.FromContext(ctx).Error(err, "Writing stack outputs failed")
			msg += "; outputs not recorded: " + err.Error()
			u.Status.Message = msg
		}
		u.Status.Outputs = name
	}
	failed := metav1.ConditionTrue
	if op.State == agentv1.OperationState_OPERATION_STATE_SUCCEEDED {
		failed = metav1.ConditionFalse
	}
	setCondition(&u.Status.Conditions, u.Generation, autov1alpha1.UpdateConditionTypeProgressing, metav1.ConditionFalse, reason, msg)
	setCondition(&u.Status.Conditions, u.Generation, autov1alpha1.UpdateConditionTypeFailed, failed, reason, msg)
	setCondition(&u.Status.Conditions, u.Generation, autov1alpha1.UpdateConditionTypeComplete, metav1.ConditionTrue, reason, msg)
	evType := corev1.EventTypeNormal
	if failed == metav1.ConditionTrue {
		evType = corev1.EventTypeWarning
	}
	r.Recorder.Event(u, evType, reason, msg)
	typ := string(u.Spec.Type)
	updatesTotal.WithLabelValues(typ, result).Inc()
	updateDuration.WithLabelValues(typ, result).Observe(u.Status.EndTime.Sub(u.Status.StartTime.Time).Seconds())
	log.FromContext(ctx).Info("Update ended", "result", result, "message", msg)
}

// writeOutputs stores the stack outputs in an immutable Secret owned by the
// Update; the annotation names the keys that are Pulumi secrets.
func (r *UpdateReconciler) writeOutputs(ctx context.Context, u *autov1alpha1.Update, outputs map[string]*agentv1.Output) (string, error) {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: u.Namespace, Name: u.Name + "-stack-outputs"}, Data: map[string][]byte{}}
	secretKeys := []string{}
	for k, v := range outputs {
		s.Data[k] = []byte(v.ValueJson)
		if v.Secret {
			secretKeys = append(secretKeys, k)
		}
	}
	b, _ := json.Marshal(secretKeys)
	s.Annotations = map[string]string{SecretsAnnotation: string(b)}
	immutable := true
	s.Immutable = &immutable
	if err := controllerutil.SetControllerReference(u, s, r.Scheme()); err != nil {
		return "", err
	}
	if err := r.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create outputs secret: %w", err)
	}
	return s.Name, nil
}

// reconcileTTL deletes a finished Update once its time to live has passed.
func (r *UpdateReconciler) reconcileTTL(ctx context.Context, u *autov1alpha1.Update) (ctrl.Result, error) {
	ttl := DefaultUpdateTTL
	if u.Spec.TtlAfterCompleted != nil {
		ttl = u.Spec.TtlAfterCompleted.Duration
	}
	end := u.Status.EndTime.Time
	if end.IsZero() {
		end = r.Now()
	}
	if remaining := end.Add(ttl).Sub(r.Now()); remaining > 0 {
		// Waiting for the TTL to expire.
		return ctrl.Result{RequeueAfter: remaining}, nil
	}
	log.FromContext(ctx).Info("Deleting finished update after its TTL", "ttl", ttl.String())
	return ctrl.Result{}, client.IgnoreNotFound(r.Delete(ctx, u))
}

func startRequest(u *autov1alpha1.Update) *agentv1.StartOperationRequest {
	s := u.Spec
	req := &agentv1.StartOperationRequest{
		UpdateId: string(u.UID), StackName: s.StackName, Type: operationType(s.Type),
		Replace: s.Replace, Target: s.Target,
	}
	b := func(p *bool) bool { return p != nil && *p }
	if s.Parallel != nil {
		req.Parallel = *s.Parallel
	}
	if s.Message != nil {
		req.Message = *s.Message
	}
	req.ExpectNoChanges, req.TargetDependents, req.Refresh = b(s.ExpectNoChanges), b(s.TargetDependents), b(s.Refresh)
	req.ContinueOnError, req.Remove, req.RunProgram = b(s.ContinueOnError), b(s.Remove), b(s.RunProgram)
	// An Update of a Stack at a commit runs only at that commit: never at
	// the revision a workspace held before (or after) checking it out.
	req.Revision = updateRevision(u)
	return req
}

func operationType(t autov1alpha1.UpdateType) agentv1.OperationType {
	switch t {
	case autov1alpha1.PreviewType:
		return agentv1.OperationType_OPERATION_TYPE_PREVIEW
	case autov1alpha1.UpType:
		return agentv1.OperationType_OPERATION_TYPE_UP
	case autov1alpha1.RefreshType:
		return agentv1.OperationType_OPERATION_TYPE_REFRESH
	case autov1alpha1.DestroyType:
		return agentv1.OperationType_OPERATION_TYPE_DESTROY
	}
	return agentv1.OperationType_OPERATION_TYPE_UNSPECIFIED
}

// followers watch running operations, one goroutine each, and wake the
// reconciler when a run ends.
type followers struct {
	ctx    context.Context
	mu     sync.Mutex
	active map[types.UID]bool
	done   chan event.GenericEvent
}

func (f *followers) follow(u *autov1alpha1.Update, agent agentv1.AgentClient) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.active[u.UID] {
		return
	}
	f.active[u.UID] = true
	wake := &autov1alpha1.Update{ObjectMeta: metav1.ObjectMeta{Namespace: u.Namespace, Name: u.Name}}
	id := string(u.UID)
	go func() {
		defer func() {
			f.mu.Lock()
			delete(f.active, u.UID)
			f.mu.Unlock()
			select {
			case f.done <- event.GenericEvent{Object: wake}:
			case <-f.ctx.Done():
			}
		}()
		// The stream's own context, cancelled when the follower returns: a
		// stream left after its result message, without reading on to its
		// end, keeps a gRPC goroutine and the stream's buffers for the life
		// of its context — the operator grew by ~20 KiB per Update.
		ctx, cancel := context.WithCancel(f.ctx)
		defer cancel()
		stream, err := agent.WatchOperation(ctx, &agentv1.GetOperationRequest{UpdateId: id})
		if err != nil {
			return
		}
		for {
			ev, err := stream.Recv()
			if err != nil || ev.GetResult() != nil {
				return
			}
		}
	}()
}

// updateRevision is the commit an Update of a Stack was made for (its
// revision annotation, when a commit SHA), or "".
func updateRevision(u *autov1alpha1.Update) string {
	if rev := u.Annotations[stack.AnnotationRevision]; isCommitSHA(rev) {
		return rev
	}
	return ""
}

// workspaceCommit is the commit a git Workspace is set to, or "" (another
// source, or a branch).
func workspaceCommit(ws *autov1alpha1.Workspace) string {
	if ws.Spec.Git != nil && isCommitSHA(ws.Spec.Git.Ref) {
		return ws.Spec.Git.Ref
	}
	return ""
}

// isCommitSHA: rev is a full git commit SHA (40 hex digits), as the Stack
// controller records for git sources; Program and Flux revisions are not.
func isCommitSHA(rev string) bool {
	if len(rev) != 40 {
		return false
	}
	_, err := hex.DecodeString(rev)
	return err == nil
}
