package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

func TestDecideCheckout(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const a, b = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	git := &autov1alpha1.WorkspaceSpec{Git: &autov1alpha1.GitSource{URL: "https://git.example/r.git", Ref: b}}
	flux := &autov1alpha1.WorkspaceSpec{Flux: &autov1alpha1.FluxSource{Url: "http://src/b.tgz", Digest: "sha256:bb"}}
	local := &autov1alpha1.WorkspaceSpec{Local: &autov1alpha1.LocalSource{Dir: "/p"}}
	at := func(ref string, co *agentv1.CheckoutStatus) *agentv1.InfoResponse {
		return &agentv1.InfoResponse{SourceRef: ref, Revision: ref, Checkout: co}
	}
	failed := func(reason string, ago time.Duration) *agentv1.CheckoutStatus {
		return &agentv1.CheckoutStatus{SourceRef: b, State: agentv1.CheckoutState_CHECKOUT_STATE_FAILED, Reason: reason,
			Message: "commit not found", EndTimeUnixNano: now.Add(-ago).UnixNano()}
	}
	running := func(ago time.Duration) *agentv1.CheckoutStatus {
		return &agentv1.CheckoutStatus{SourceRef: b, State: agentv1.CheckoutState_CHECKOUT_STATE_RUNNING, StartTimeUnixNano: now.Add(-ago).UnixNano()}
	}
	cases := []struct {
		name    string
		spec    *autov1alpha1.WorkspaceSpec
		info    *agentv1.InfoResponse
		want    checkoutAction
		reason  string
		stalled bool
		after   time.Duration
	}{
		{name: "at the revision", spec: git, info: at(b, nil), want: checkoutDone},
		{name: "local source", spec: local, info: at("", nil), want: checkoutDone},
		{name: "no source", spec: &autov1alpha1.WorkspaceSpec{}, info: at("", nil), want: checkoutDone},
		{name: "new commit", spec: git, info: at(a, nil), want: checkoutStart},
		{name: "new artifact", spec: flux, info: at("sha256:aa", nil), want: checkoutStart},
		{name: "artifact in place", spec: flux, info: at("sha256:bb", nil), want: checkoutDone},
		{name: "an older checkout failed", spec: git, info: at(a, &agentv1.CheckoutStatus{SourceRef: "cccc", State: agentv1.CheckoutState_CHECKOUT_STATE_FAILED, Reason: "SourceUnavailable"}), want: checkoutStart},
		{name: "checking out, agent gives no start", spec: git, info: at(a, &agentv1.CheckoutStatus{SourceRef: b, State: agentv1.CheckoutState_CHECKOUT_STATE_RUNNING}),
			want: checkoutWait, reason: autov1alpha1.WorkspaceReasonInitializing, after: 2 * time.Second},
		{name: "checking out, just started", spec: git, info: at(a, running(50*time.Millisecond)),
			want: checkoutWait, reason: autov1alpha1.WorkspaceReasonInitializing, after: 100 * time.Millisecond},
		{name: "checking out for 600ms", spec: git, info: at(a, running(600*time.Millisecond)),
			want: checkoutWait, reason: autov1alpha1.WorkspaceReasonInitializing, after: 300 * time.Millisecond},
		{name: "checking out for 3s", spec: git, info: at(a, running(3*time.Second)),
			want: checkoutWait, reason: autov1alpha1.WorkspaceReasonInitializing, after: 1500 * time.Millisecond},
		{name: "checking out for a minute", spec: git, info: at(a, running(time.Minute)),
			want: checkoutWait, reason: autov1alpha1.WorkspaceReasonInitializing, after: 2 * time.Second},
		{name: "checking out, agent clock ahead", spec: git, info: at(a, running(-time.Second)),
			want: checkoutWait, reason: autov1alpha1.WorkspaceReasonInitializing, after: 100 * time.Millisecond},
		{name: "missing commit, just now", spec: git, info: at(a, failed("SourceUnavailable", 10*time.Second)),
			want: checkoutFailed, reason: autov1alpha1.WorkspaceReasonSourceUnavailable, stalled: true, after: 50 * time.Second},
		{name: "install timed out, just now", spec: git, info: at(a, failed("InstallationFailed", 30*time.Second)),
			want: checkoutFailed, reason: autov1alpha1.WorkspaceReasonInstallationFailed, stalled: true, after: 30 * time.Second},
		{name: "missing commit, a minute ago", spec: git, info: at(a, failed("SourceUnavailable", time.Minute)), want: checkoutStart},
		{name: "network error, just now", spec: git, info: at(a, failed("", 2*time.Second)),
			want: checkoutFailed, reason: autov1alpha1.WorkspaceReasonCheckoutFailed, after: 3 * time.Second},
		{name: "network error, retry due", spec: git, info: at(a, failed("", 5*time.Second)), want: checkoutStart},
		{name: "succeeded, then moved", spec: git, info: at(a, &agentv1.CheckoutStatus{SourceRef: b, State: agentv1.CheckoutState_CHECKOUT_STATE_SUCCEEDED}), want: checkoutStart},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := decideCheckout(tc.spec, tc.info, now)
			if d.Action != tc.want || d.Reason != tc.reason || d.Stalled != tc.stalled || d.After != tc.after {
				t.Fatalf("decideCheckout = %+v, want action %d reason %q stalled %v after %s", d, tc.want, tc.reason, tc.stalled, tc.after)
			}
			if (d.Action == checkoutStart) != (d.Request != nil) {
				t.Fatalf("request %v for action %d", d.Request, d.Action)
			}
			if d.Action == checkoutFailed && !strings.Contains(d.Message, "commit not found") {
				t.Fatalf("message %q does not give the agent's account", d.Message)
			}
		})
	}
	if d := decideCheckout(flux, at("sha256:aa", nil), now); d.Request.GetArtifactUrl() != "http://src/b.tgz" || d.Request.GetArtifactDigest() != "sha256:bb" {
		t.Fatalf("artifact request = %v", d.Request)
	}
}

// checkoutRecorder is an agent that records the Checkout requests it gets.
type checkoutRecorder struct {
	agentv1.AgentClient
	requests []*agentv1.CheckoutRequest
}

func (a *checkoutRecorder) Checkout(_ context.Context, req *agentv1.CheckoutRequest, _ ...grpc.CallOption) (*agentv1.CheckoutStatus, error) {
	a.requests = append(a.requests, req)
	return &agentv1.CheckoutStatus{SourceRef: req.GetGitRef(), State: agentv1.CheckoutState_CHECKOUT_STATE_RUNNING}, nil
}

// TestCheckoutSendsCurrentCredentials: each Checkout carries the values the
// Workspace's credential Secrets hold when it is asked (a rotated token
// reaches the agent's next fetch), with the operator's known_hosts for an
// SSH key naming none; a missing Secret or key stalls the Workspace, naming
// it and never a value, and asks nothing of the agent.
func TestCheckoutSendsCurrentCredentials(t *testing.T) {
	const a, b = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "git"},
		Data: map[string][]byte{"token": []byte("token-one"), "key": []byte("ssh-key-one")}}
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(sec).Build()
	r := &WorkspaceReconciler{Client: c, SSHKnownHosts: "git.example ssh-ed25519 AAAA"}
	sel := func(key string) *corev1.SecretKeySelector {
		return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "git"}, Key: key}
	}
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", Generation: 2}, Spec: autov1alpha1.WorkspaceSpec{
		Git: &autov1alpha1.GitSource{URL: "https://git.example/r.git", Ref: b, Auth: &autov1alpha1.GitAuth{Token: sel("token")}}}}
	info := &agentv1.InfoResponse{SourceRef: a, Revision: a}
	ctx := context.Background()
	agent := &checkoutRecorder{}
	checkout := func() (ctrl.Result, error) {
		t.Helper()
		outcome := r.reconcileCheckout(ctx, &workspaceScope{ws: ws, agent: agent, info: info})
		if outcome == nil {
			t.Fatal("checkout done before the agent checked out")
		}
		return r.finisher().summarize(ws, outcome)
	}
	lastCreds := func() *agentv1.GitCredentials {
		t.Helper()
		if len(agent.requests) == 0 {
			t.Fatal("no Checkout request")
		}
		return agent.requests[len(agent.requests)-1].GetGitCredentials()
	}

	if _, err := checkout(); err != nil {
		t.Fatal(err)
	}
	if got := lastCreds(); got.GetToken() != "token-one" || got.GetKnownHosts() != "" {
		t.Fatalf("credentials = token %q, known_hosts %q; want token-one and none", got.GetToken(), got.GetKnownHosts())
	}
	sec.Data["token"] = []byte("token-two")
	if err := c.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	if _, err := checkout(); err != nil {
		t.Fatal(err)
	}
	if got := lastCreds().GetToken(); got != "token-two" {
		t.Fatalf("after the rotation the checkout carries token %q, want token-two", got)
	}

	ws.Spec.Git.Auth = &autov1alpha1.GitAuth{SSHPrivateKey: sel("key")}
	if _, err := checkout(); err != nil {
		t.Fatal(err)
	}
	if got := lastCreds(); got.GetSshPrivateKey() != "ssh-key-one" || got.GetKnownHosts() != r.SSHKnownHosts {
		t.Fatalf("SSH credentials = key %q, known_hosts %q; want the key and the operator's known_hosts", got.GetSshPrivateKey(), got.GetKnownHosts())
	}

	// A workspace without credentials says so: the agent fetches without.
	ws.Spec.Git.Auth = nil
	if _, err := checkout(); err != nil {
		t.Fatal(err)
	}
	if got := lastCreds(); got == nil || got.GetToken() != "" || got.GetSshPrivateKey() != "" {
		t.Fatalf("credentials without auth = %v, want an empty message", got)
	}

	asked := len(agent.requests)
	for _, tc := range []struct{ name, secret, key, want string }{
		{"missing key", "git", "nope", "secret git has no key nope"},
		{"missing secret", "gone", "token", "secret gone"},
	} {
		ws.Spec.Git.Auth = &autov1alpha1.GitAuth{Token: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: tc.secret}, Key: tc.key}}
		ws.Status.Conditions = nil
		res, err := checkout()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		stalled := apimeta.FindStatusCondition(ws.Status.Conditions, autov1alpha1.WorkspaceStalled)
		if stalled == nil || stalled.Reason != autov1alpha1.WorkspaceReasonSourceUnavailable || !strings.Contains(stalled.Message, tc.want) || res.RequeueAfter != checkoutRetryClassified {
			t.Fatalf("%s: stalled = %v, requeue %s; want SourceUnavailable saying %q, again in %s", tc.name, stalled, res.RequeueAfter, tc.want, checkoutRetryClassified)
		}
		for _, v := range []string{"token-two", "ssh-key-one"} {
			if strings.Contains(stalled.Message, v) {
				t.Fatalf("%s: the message holds a secret: %s", tc.name, stalled.Message)
			}
		}
	}
	if len(agent.requests) != asked {
		t.Fatal("the agent was asked to check out without readable credentials")
	}
}
