package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/agentclient"
	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
	"github.com/stackflow-io/stackflow/operator/internal/workspace"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

// Retry delays of a failed in-place checkout: one the agent classified
// (the revision is missing or refused, its dependencies failed to install)
// is asked again after a minute, in case the source catches up; one that may
// pass (a network error) after a few seconds.
const (
	checkoutRetryClassified = time.Minute
	checkoutRetryTransient  = 5 * time.Second
)

// checkoutAction is what the Workspace controller does about the revision a
// serving agent holds.
type checkoutAction int

const (
	// checkoutDone: the agent holds the spec's revision.
	checkoutDone checkoutAction = iota
	// checkoutStart: ask the agent to check the spec's revision out.
	checkoutStart
	// checkoutWait: the agent is checking it out.
	checkoutWait
	// checkoutFailed: its checkout failed; report it until the retry.
	checkoutFailed
)

// checkoutDecision says what to do, and for checkoutWait and checkoutFailed
// the condition to report and when to look again.
type checkoutDecision struct {
	Action  checkoutAction
	Request *agentv1.CheckoutRequest
	Reason  string
	Message string
	// Stalled: the failure needs the source or the spec to change.
	Stalled bool
	After   time.Duration
}

// checkoutRequest is the Checkout request for the spec's source revision and
// the source ref the agent reports once it holds it; nil for a source
// without revisions (a local directory, a program baked into the image).
func checkoutRequest(spec *autov1alpha1.WorkspaceSpec) (*agentv1.CheckoutRequest, string) {
	switch {
	case spec.Git != nil && spec.Git.Ref != "":
		return &agentv1.CheckoutRequest{GitRef: spec.Git.Ref}, spec.Git.Ref
	case spec.Flux != nil && spec.Flux.Digest != "":
		return &agentv1.CheckoutRequest{ArtifactUrl: spec.Flux.Url, ArtifactDigest: spec.Flux.Digest}, spec.Flux.Digest
	}
	return nil, ""
}

// decideCheckout compares the revision a serving agent holds (and its last
// checkout) with the spec's. Everything it decides from is the agent's own
// account, so a restarted operator decides the same.
func decideCheckout(spec *autov1alpha1.WorkspaceSpec, info *agentv1.InfoResponse, now time.Time) checkoutDecision {
	req, ref := checkoutRequest(spec)
	if req == nil || info.GetSourceRef() == ref {
		return checkoutDecision{Action: checkoutDone}
	}
	start := checkoutDecision{Action: checkoutStart, Request: req}
	co := info.GetCheckout()
	if co.GetSourceRef() != ref {
		return start
	}
	switch co.GetState() {
	case agentv1.CheckoutState_CHECKOUT_STATE_RUNNING:
		return checkoutDecision{Action: checkoutWait, Reason: autov1alpha1.WorkspaceReasonInitializing,
			Message: fmt.Sprintf("the agent is checking out %s in place (it holds %s)", ref, shortRev(info.GetRevision())),
			After:   checkoutPoll(co, now)}
	case agentv1.CheckoutState_CHECKOUT_STATE_FAILED:
		retry, reason := checkoutRetryTransient, autov1alpha1.WorkspaceReasonCheckoutFailed
		if co.GetReason() != "" {
			retry, reason = checkoutRetryClassified, co.GetReason()
		}
		at := time.Unix(0, co.GetEndTimeUnixNano()).Add(retry)
		left := at.Sub(now)
		if left <= 0 {
			return start
		}
		// The retry's time, not a countdown: the message stays the same
		// across reconciles, so the status is not rewritten each time.
		return checkoutDecision{Action: checkoutFailed, Reason: reason, Stalled: co.GetReason() != "", After: left,
			Message: fmt.Sprintf("check out %s: %s (the agent keeps %s; asked again at %s)", ref, co.GetMessage(), shortRev(info.GetRevision()), at.UTC().Format(time.RFC3339))}
	}
	return start
}

// Polls of a running checkout: the agent is asked again after half the
// time the checkout has run so far, between checkoutPollMin and
// checkoutPollMax, so a fast fetch (most are under a second) is seen within
// a fraction of its time and a slow one is not asked about many times. An
// agent that gives no start time is asked every checkoutPollMax.
const (
	checkoutPollMin = 100 * time.Millisecond
	checkoutPollMax = 2 * time.Second
)

// checkoutPoll is when to ask again about a running checkout.
func checkoutPoll(co *agentv1.CheckoutStatus, now time.Time) time.Duration {
	if co.GetStartTimeUnixNano() == 0 {
		return checkoutPollMax
	}
	return min(max(now.Sub(time.Unix(0, co.GetStartTimeUnixNano()))/2, checkoutPollMin), checkoutPollMax)
}

// reconcileCheckout moves a serving agent to the spec's source revision in
// place, without a new pod or process. It goes on once the agent holds that
// revision.
func (r *WorkspaceReconciler) reconcileCheckout(ctx context.Context, sc *workspaceScope) error {
	ws, info := sc.ws, sc.info
	d := decideCheckout(&ws.Spec, info, r.now())
	switch d.Action {
	case checkoutDone:
		return nil
	case checkoutWait, checkoutFailed:
		if d.Stalled {
			return &stallingError{reason: d.Reason, msg: d.Message, requeue: d.After}
		}
		return &waitingError{reason: d.Reason, msg: d.Message, requeue: d.After}
	}
	if ws.Spec.Git != nil {
		// The Secrets' values now, not those the agent started with: a
		// rotated token or key is used by this very fetch.
		creds, err := workspace.GitCredentials(ctx, r.Client, ws, r.SSHKnownHosts)
		if err != nil {
			return credentialsUnreadable(err)
		}
		d.Request.GitCredentials = agentclient.GitCredentials(creds)
	}
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := sc.agent.Checkout(callCtx, d.Request)
	switch status.Code(err) {
	case codes.OK:
	case codes.FailedPrecondition:
		// An update or a configuration runs: the checkout waits for it.
		return &waitingError{reason: autov1alpha1.WorkspaceReasonInitializing, requeue: 5 * time.Second,
			msg: "waiting to check out the new revision: " + status.Convert(err).Message()}
	case codes.Unimplemented:
		return &stallingError{reason: autov1alpha1.WorkspaceReasonCheckoutFailed,
			msg: "the workspace's agent cannot check out a new revision in place (it predates the operator's); " +
				"use a workspace image with the operator's agent, or recreate the Workspace"}
	default:
		return fmt.Errorf("ask the agent to check out the new revision: %w", err)
	}
	log.FromContext(ctx).Info("Checking out the new revision in place", "ref", st.GetSourceRef(), "from", info.GetRevision())
	return &waitingError{reason: autov1alpha1.WorkspaceReasonInitializing, requeue: checkoutPoll(st, r.now()),
		msg: fmt.Sprintf("the agent is checking out %s in place (it holds %s)", st.GetSourceRef(), shortRev(info.GetRevision()))}
}

// credentialsUnreadable classifies git credentials that cannot be read for a
// checkout: a missing Secret or key, or a reference that cannot be used,
// stalls the Workspace until someone fixes it (looked at again after a
// minute: Secrets are not watched); anything else (the API server) is
// transient, retried with backoff. The message names the Secret and key,
// never a value.
func credentialsUnreadable(err error) error {
	var missingKey *workspace.MissingKeyError
	var unusable *gitauth.CredentialsError
	if !apierrors.IsNotFound(err) && !errors.As(err, &missingKey) && !errors.As(err, &unusable) {
		return fmt.Errorf("read the git credentials for a checkout: %w", err)
	}
	return &stallingError{reason: autov1alpha1.WorkspaceReasonSourceUnavailable, msg: "cannot check out the new revision: " + err.Error(),
		requeue: checkoutRetryClassified}
}
