package controller

import (
	"strings"
	"testing"
	"time"

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
		{name: "checking out", spec: git, info: at(a, &agentv1.CheckoutStatus{SourceRef: b, State: agentv1.CheckoutState_CHECKOUT_STATE_RUNNING}),
			want: checkoutWait, reason: autov1alpha1.WorkspaceReasonInitializing, after: 2 * time.Second},
		{name: "missing commit, just now", spec: git, info: at(a, failed("SourceUnavailable", 10*time.Second)),
			want: checkoutFailed, reason: autov1alpha1.WorkspaceReasonSourceUnavailable, stalled: true, after: 50 * time.Second},
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
