package controller

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

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
	// Exits, when set, says why a workspace's agent last ended against its
	// will (the pod runtime reads the kubelet's account), for an Update whose
	// run the agent no longer knows: "OOMKilled …" rather than only "the
	// workspace restarted".
	Exits workspace.ExitReporter
	// Tokens remembers agent tokens (shared with the Workspace controller):
	// the reconciles of an Update (one to start it, one to record its end)
	// and of the Updates after it do not read the token Secret; nil reads it
	// every time.
	Tokens *AgentTokens
}

// updateScope is what one reconcile of an Update has learned so far.
type updateScope struct {
	update *autov1alpha1.Update
	// agent runs the Update: its workspace's.
	agent agentv1.AgentClient
	// workspaceUID is the UID of the agent's Workspace (its token's key).
	workspaceUID types.UID
	// notices are what the agent did besides the run (a stale lock it
	// removed), reported once the run's end is stored.
	notices []string
}

// Reconcile converges one Update: once ended, it waits for its TTL;
// otherwise it finds its workspace's agent, starts the run there and returns,
// and records the run's end when its follower wakes it. The finisher writes
// the status.
func (r *UpdateReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	u := &autov1alpha1.Update{}
	if err := r.Get(ctx, req.NamespacedName, u); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	base, sc := u.DeepCopy(), &updateScope{update: u}
	outcome := runSteps(ctx, sc, r.reconcileEnded, r.reconcileDeleted, r.reconcileWorkspace, r.reconcileStart, r.reconcileProgress)
	return r.finisher().finish(ctx, base, u, outcome, func(context.Context) error {
		if len(sc.notices) > 0 {
			r.Recorder.Event(u, corev1.EventTypeWarning, "StaleLockRecovered", strings.Join(sc.notices, "; "))
		}
		return nil
	})
}

// reconcileEnded ends the reconcile of an Update whose run has ended: it
// waits for its TTL (and, deleted, for nothing).
func (r *UpdateReconciler) reconcileEnded(ctx context.Context, sc *updateScope) error {
	u := sc.update
	complete := apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeComplete)
	switch {
	case !u.DeletionTimestamp.IsZero() && (complete || len(u.Finalizers) == 0):
		return errUpToDate
	case complete:
		return r.reconcileTTL(ctx, u)
	}
	return nil
}

// reconcileDeleted: an Update deleted while it runs (its Stack's result
// finalizer keeps it) is still followed to its end, so its Stack records the
// result; one deleted before it started never starts.
func (r *UpdateReconciler) reconcileDeleted(ctx context.Context, sc *updateScope) error {
	u := sc.update
	if u.DeletionTimestamp.IsZero() || progressing(u) {
		return nil
	}
	return r.end(ctx, sc, &agentv1.Operation{State: agentv1.OperationState_OPERATION_STATE_CANCELED, Message: "deleted before it started"})
}

func progressing(u *autov1alpha1.Update) bool {
	return apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeProgressing)
}

// reconcileWorkspace finds the Update's workspace agent. The Update waits
// while the workspace is missing or not ready, and ends as Aborted when its
// workspace goes while it runs.
func (r *UpdateReconciler) reconcileWorkspace(ctx context.Context, sc *updateScope) error {
	u := sc.update
	running := progressing(u)
	var ws autov1alpha1.Workspace
	err := r.Get(ctx, types.NamespacedName{Namespace: u.Namespace, Name: u.Spec.WorkspaceName}, &ws)
	if apierrors.IsNotFound(err) {
		if running {
			return r.end(ctx, sc, &agentv1.Operation{State: agentv1.OperationState_OPERATION_STATE_UNKNOWN,
				Message: fmt.Sprintf("workspace %s was deleted while the update ran", u.Spec.WorkspaceName)})
		}
		// The Workspace watch wakes this Update when it appears.
		return &waitingError{reason: autov1alpha1.UpdateReasonNotStarted, msg: fmt.Sprintf("waiting for workspace %s to exist", u.Spec.WorkspaceName)}
	}
	if err != nil {
		return err
	}
	if rev, wsRev := updateRevision(u), workspaceCommit(&ws); !running && rev != "" && wsRev != "" && rev != wsRev {
		// The agent runs an Update at its commit only (startRequest), and
		// this workspace has moved on: it would wait forever. Ended, so that
		// its Stack starts one for the workspace's commit.
		return r.end(ctx, sc, &agentv1.Operation{State: agentv1.OperationState_OPERATION_STATE_UNKNOWN,
			Message: fmt.Sprintf("not started: workspace %s is set to commit %s, not this update's %s", ws.Name, wsRev, rev)})
	}
	ready := conditions.IsTrue(&ws, ws.Status.Conditions, autov1alpha1.WorkspaceReady) &&
		ws.Status.ObservedGeneration == ws.Generation && ws.Status.Address != ""
	if !ready && !running {
		// The Workspace watch wakes this Update when it is ready.
		return &waitingError{reason: autov1alpha1.UpdateReasonNotStarted, msg: fmt.Sprintf("waiting for workspace %s to be ready", ws.Name)}
	}
	var token string
	if r.Agents.WorkspaceTokens() {
		if token, err = r.workspaceToken(ctx, &ws); err != nil {
			return err
		}
	}
	agent, err := r.Agents.Get(ws.Status.Address, token)
	if err != nil {
		return err
	}
	sc.agent, sc.workspaceUID = agent, ws.UID
	return nil
}

// workspaceToken is the agent token of ws, read from its Secret once per
// Workspace UID (see AgentTokens).
func (r *UpdateReconciler) workspaceToken(ctx context.Context, ws *autov1alpha1.Workspace) (string, error) {
	if t, ok := r.Tokens.get(ws.UID); ok {
		return t, nil
	}
	var tok corev1.Secret
	if err := r.Get(ctx, types.NamespacedName{Namespace: ws.Namespace, Name: workspace.TokenSecretName(ws)}, &tok); err != nil {
		return "", fmt.Errorf("read workspace token: %w", err)
	}
	token := string(tok.Data[pod.TokenSecretKey])
	r.Tokens.put(ws.UID, token)
	return token, nil
}

// refused drops the remembered token of the Workspace whose agent refused
// it (err is Unauthenticated): the next reconcile, which the returned error
// brings, reads the Secret again.
func (r *UpdateReconciler) refused(sc *updateScope, err error) {
	if status.Code(err) == codes.Unauthenticated {
		r.Tokens.forget(sc.workspaceUID)
	}
}

// reconcileStart starts the operation and returns at once; the follower
// wakes the Update when the run ends.
func (r *UpdateReconciler) reconcileStart(ctx context.Context, sc *updateScope) error {
	u := sc.update
	if progressing(u) {
		return nil
	}
	req := startRequest(u)
	if name := u.Spec.PlanSecretName; name != "" {
		data, err := r.readPlan(ctx, u.Namespace, name)
		if err != nil {
			if apierrors.IsNotFound(err) || errors.Is(err, errNoPlan) {
				return r.end(ctx, sc, &agentv1.Operation{State: agentv1.OperationState_OPERATION_STATE_FAILED,
					Message: fmt.Sprintf("the update plan to apply is gone: Secret %s has no %s (it is kept as long as the plan may be approved)", name, planKey)})
			}
			return err
		}
		req.Plan = data
	}
	callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	op, err := sc.agent.StartOperation(callCtx, req)
	if status.Code(err) == codes.FailedPrecondition {
		// The workspace restarted and its configuration is being applied
		// again by the Workspace controller.
		return &waitingError{reason: autov1alpha1.UpdateReasonNotStarted, msg: status.Convert(err).Message(), requeue: 3 * time.Second}
	}
	if err != nil {
		r.refused(sc, err)
		return fmt.Errorf("start %s in workspace %s: %w", u.Spec.Type, u.Spec.WorkspaceName, err)
	}
	if op.State != agentv1.OperationState_OPERATION_STATE_RUNNING {
		return r.end(ctx, sc, op)
	}
	u.Status.StartTime = metav1.NewTime(time.Unix(0, op.StartTimeUnixNano))
	log.FromContext(ctx).Info("Started operation", "type", u.Spec.Type, "stack", u.Spec.StackName)
	return r.follow(sc)
}

// follow has the follower watch the run; the requeue is a safety net should
// its stream break unnoticed.
func (r *UpdateReconciler) follow(sc *updateScope) error {
	r.followers.follow(sc.update, sc.agent)
	return &waitingError{reason: autov1alpha1.UpdateReasonProgressing, msg: runningMessage(sc.update), requeue: 2 * time.Minute}
}

// agentExit is why u's workspace agent last ended against its will since
// the Update was created, as the runtime tells it; "" when it cannot (an
// error is logged, not returned: the Update ends either way).
func (r *UpdateReconciler) agentExit(ctx context.Context, u *autov1alpha1.Update) string {
	if r.Exits == nil {
		return ""
	}
	ws := &autov1alpha1.Workspace{}
	ws.Namespace, ws.Name = u.Namespace, u.Spec.WorkspaceName
	why, err := r.Exits.AgentExit(ctx, ws, u.CreationTimestamp.Time)
	if err != nil {
		log.FromContext(ctx).Info("Could not tell why the workspace restarted", "workspace", ws.Name, "error", err.Error())
	}
	return why
}

func runningMessage(u *autov1alpha1.Update) string {
	return fmt.Sprintf("%s of stack %s running in workspace %s", u.Spec.Type, u.Spec.StackName, u.Spec.WorkspaceName)
}

// reconcileProgress asks the agent about the run: still running (follow it),
// ended (record the result), or unknown to the agent (the workspace restarted:
// the run is gone, the Update is Aborted — never left Progressing).
func (r *UpdateReconciler) reconcileProgress(ctx context.Context, sc *updateScope) error {
	u := sc.update
	callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	op, err := sc.agent.GetOperation(callCtx, &agentv1.GetOperationRequest{UpdateId: string(u.UID)})
	if err != nil {
		// The agent may be restarting; backoff applies, and once it answers
		// the run is found or reported unknown.
		r.refused(sc, err)
		return fmt.Errorf("ask workspace %s about the run: %w", u.Spec.WorkspaceName, err)
	}
	if op.State == agentv1.OperationState_OPERATION_STATE_RUNNING {
		return r.follow(sc)
	}
	return r.end(ctx, sc, op)
}

// end records an ended run (times, message, changes, outputs, and the
// Complete condition) and goes on to wait for the TTL.
func (r *UpdateReconciler) end(ctx context.Context, sc *updateScope, op *agentv1.Operation) error {
	u := sc.update
	reason := endReason(op.State)
	if op.State == agentv1.OperationState_OPERATION_STATE_UNKNOWN && op.Message == "" {
		op.Message = fmt.Sprintf("the run is gone: workspace %s restarted or was replaced before the update reported a result", u.Spec.WorkspaceName)
		if why := r.agentExit(ctx, u); why != "" {
			op.Message = fmt.Sprintf("%s; the run is gone: workspace %s restarted before the update reported a result", why, u.Spec.WorkspaceName)
		}
	}
	if op.EndTimeUnixNano > 0 {
		u.Status.EndTime = metav1.NewTime(time.Unix(0, op.EndTimeUnixNano))
	} else {
		u.Status.EndTime = metav1.NewTime(r.Now())
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
		sc.notices = op.Notices
	}
	u.Status.Message = msg
	u.Status.Permalink = op.Permalink
	u.Status.Changes = op.Changes
	u.Status.Resources = op.ChangedResources
	if len(u.Status.Resources) > 100 {
		u.Status.Resources = u.Status.Resources[:100]
	}
	if op.State == agentv1.OperationState_OPERATION_STATE_SUCCEEDED && len(op.Outputs) > 0 {
		name, err := r.writeOutputs(ctx, u, op.Outputs)
		if err != nil {
			log.FromContext(ctx).Error(err, "Writing stack outputs failed")
			msg += "; outputs not recorded: " + err.Error()
			u.Status.Message = msg
		}
		u.Status.Outputs = name
	}
	if len(op.Plan) > 0 {
		name, err := r.writePlan(ctx, u, op.Plan)
		if err != nil {
			// Transient: the run's result is recorded once the plan is.
			return err
		}
		u.Status.PlanSecretName = name
	}
	if op.PlanViolation != "" {
		u.Status.PlanViolation = op.PlanViolation
		reason = autov1alpha1.UpdateReasonPlanStale
	}
	markEnded(u, reason, op.State != agentv1.OperationState_OPERATION_STATE_SUCCEEDED, msg)
	return r.reconcileTTL(ctx, u)
}

// endReason is the Complete reason of a run that ended in state.
func endReason(state agentv1.OperationState) string {
	switch state {
	case agentv1.OperationState_OPERATION_STATE_SUCCEEDED:
		return autov1alpha1.UpdateReasonSucceeded
	case agentv1.OperationState_OPERATION_STATE_CONFLICT:
		return autov1alpha1.UpdateReasonConflict
	case agentv1.OperationState_OPERATION_STATE_CANCELED:
		return autov1alpha1.UpdateReasonCanceled
	case agentv1.OperationState_OPERATION_STATE_STACK_NOT_FOUND:
		return autov1alpha1.UpdateReasonStackNotFound
	case agentv1.OperationState_OPERATION_STATE_UNKNOWN:
		return autov1alpha1.UpdateReasonAborted
	}
	return autov1alpha1.UpdateReasonFailed
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

// planKey is the key of the update plan in its Secret.
const planKey = "plan.json"

var errNoPlan = errors.New("no update plan")

// writePlan stores the update plan a preview saved in an immutable Secret
// owned by the Update (it lives as long as the Update: a Stack requiring
// approval keeps its plan previews for as long as their plans may be
// approved, spec.ttlAfterCompleted). Its secret values are encrypted by the
// stack's secrets provider; the Secret is readable by whoever reads Secrets
// in the namespace, like the Stack's own inputs.
func (r *UpdateReconciler) writePlan(ctx context.Context, u *autov1alpha1.Update, data []byte) (string, error) {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: u.Namespace, Name: u.Name + "-plan"}, Data: map[string][]byte{planKey: data}}
	immutable := true
	s.Immutable = &immutable
	if err := controllerutil.SetControllerReference(u, s, r.Scheme()); err != nil {
		return "", err
	}
	if err := r.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create plan secret: %w", err)
	}
	return s.Name, nil
}

// readPlan reads the update plan an up is constrained to.
func (r *UpdateReconciler) readPlan(ctx context.Context, namespace, name string) ([]byte, error) {
	var s corev1.Secret
	if err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &s); err != nil {
		return nil, err
	}
	if len(s.Data[planKey]) == 0 {
		return nil, errNoPlan
	}
	return s.Data[planKey], nil
}

// reconcileTTL deletes a finished Update once its time to live has passed.
func (r *UpdateReconciler) reconcileTTL(ctx context.Context, u *autov1alpha1.Update) error {
	ttl := DefaultUpdateTTL
	if u.Spec.TtlAfterCompleted != nil {
		ttl = u.Spec.TtlAfterCompleted.Duration
	}
	end := u.Status.EndTime.Time
	if end.IsZero() {
		end = r.Now()
	}
	if remaining := end.Add(ttl).Sub(r.Now()); remaining > 0 {
		// Looked at again when the TTL expires.
		return upToDate(remaining)
	}
	log.FromContext(ctx).Info("Deleting finished update after its TTL", "ttl", ttl.String())
	if err := r.Delete(ctx, u); client.IgnoreNotFound(err) != nil {
		return err
	}
	return errUpToDate
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
	req.SavePlan = b(s.SavePlan) && s.Type == autov1alpha1.PreviewType
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
