package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/controller"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// These tests run the Stack controller alone against a real kube-apiserver,
// the test playing the Workspace controller's part by writing Workspace
// status as it does (conditions at the generation they describe).

// startStackController starts a control plane and a manager running only a
// StackReconciler configured by configure, until the test ends.
func startStackController(t *testing.T, configure func(*controller.StackReconciler)) *substrate.ControlPlane {
	t.Helper()
	cp, err := substrate.StartControlPlane()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Logf("stop control plane: %v", err)
		}
	})
	ctrl.SetLogger(logr.Discard()) // the conditions tell what the controller did
	skip := true
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{Scheme: cp.Client.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: &skip}})
	if err != nil {
		t.Fatal(err)
	}
	r := &controller.StackReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorderFor("stack-controller"), DigestKey: []byte("test-key")}
	configure(r)
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { // registered after the control plane's: runs before it
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	return cp
}

// waitFor polls obj until check says done (nil) or fails (an error it
// returns through fail), for at most timeout.
func waitFor(t *testing.T, c client.Client, obj client.Object, timeout time.Duration, what string, check func() (done bool, fail error)) {
	t.Helper()
	substrate.Eventually(t, timeout, what, func() (bool, error) {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		done, fail := check()
		if fail != nil {
			t.Fatalf("waiting for %s: %v", what, fail)
		}
		return done, fmt.Errorf("not yet: %s", conditionsOf(obj))
	})
}

func conditionsOf(obj client.Object) string {
	s, ok := obj.(*pulumiv1.Stack)
	if !ok {
		return ""
	}
	var out []string
	for _, c := range s.Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s/%s@%d %q", c.Type, c.Status, c.Reason, c.ObservedGeneration, c.Message))
	}
	return strings.Join(out, "; ")
}

// setWorkspaceStatus writes a Workspace's status as its controller does for
// its current generation.
func setWorkspaceStatus(t *testing.T, c client.Client, ws *autov1alpha1.Workspace, ready bool, reason, msg string) {
	t.Helper()
	gen := ws.Generation
	ws.Status.Conditions = nil
	if ready {
		ws.Status.ObservedGeneration, ws.Status.Address = gen, "127.0.0.1:1"
		apimeta.SetStatusCondition(&ws.Status.Conditions, metav1.Condition{Type: autov1alpha1.WorkspaceReady, Status: metav1.ConditionTrue, Reason: autov1alpha1.WorkspaceReasonRunning, Message: msg, ObservedGeneration: gen})
	} else {
		apimeta.SetStatusCondition(&ws.Status.Conditions, metav1.Condition{Type: autov1alpha1.WorkspaceReady, Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: gen})
		apimeta.SetStatusCondition(&ws.Status.Conditions, metav1.Condition{Type: autov1alpha1.WorkspaceStalled, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	if err := c.Status().Update(context.Background(), ws); err != nil {
		t.Fatal(err)
	}
}

func namespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// TestStaleWorkspaceStallDoesNotStallTheNewGeneration: a Stack stalled on a
// checkout that failed, then promoted to a fixing commit, waits for its
// Workspace to take the new commit instead of going Stalled at its new
// generation (which the verification service answers as a terminal Failed,
// and Argo CD shows as Degraded), and starts the update once the Workspace
// is ready for it.
func TestStaleWorkspaceStallDoesNotStallTheNewGeneration(t *testing.T) {
	cp := startStackController(t, func(*controller.StackReconciler) {})
	c, ctx := cp.Client, context.Background()
	ns := namespace(t, c)
	broken, fixed := strings.Repeat("1", 40), strings.Repeat("2", 40)
	s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Spec: pulumiv1.StackSpec{Stack: "dev",
		GitSource: &pulumiv1.GitSource{ProjectRepo: "https://git.example.com/acme/app.git", Commit: broken}}}
	if err := c.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
	substrate.Eventually(t, time.Minute, "the Stack's Workspace", func() (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(ws), ws)
		return err == nil && ws.Spec.Git != nil && ws.Spec.Git.Ref == broken, err
	})
	failure := fmt.Sprintf("checkout of %s failed: reference not found", broken[:7])
	setWorkspaceStatus(t, c, ws, false, autov1alpha1.WorkspaceReasonSourceUnavailable, failure)
	waitFor(t, c, s, time.Minute, "the Stack stalled on the failed checkout", func() (bool, error) {
		st := apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.StalledCondition)
		return st != nil && st.Reason == pulumiv1.StalledSourceUnavailableReason && strings.Contains(st.Message, failure) && s.Status.ObservedGeneration == s.Generation, nil
	})

	// The promotion: a fixing commit.
	s.Spec.Commit = fixed
	if err := c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	gen := s.Generation
	waitFor(t, c, s, time.Minute, "the Stack waiting for the Workspace to take the fixing commit", func() (bool, error) {
		if st := apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.StalledCondition); st != nil && st.ObservedGeneration >= gen {
			return false, fmt.Errorf("Stalled at generation %d from the Workspace's previous failure: %s", gen, conditionsOf(s))
		}
		rc := apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.ReconcilingCondition)
		return rc != nil && rc.ObservedGeneration == gen && strings.Contains(rc.Message, "waiting for the workspace to apply its new spec"), nil
	})
	if err := c.Get(ctx, client.ObjectKeyFromObject(ws), ws); err != nil || ws.Spec.Git.Ref != fixed {
		t.Fatalf("Workspace at %v, %v; want the fixing commit", ws.Spec.Git, err)
	}

	// The Workspace checks the fixing commit out: the Stack runs it.
	setWorkspaceStatus(t, c, ws, true, "", "agent ready at "+fixed[:7])
	waitFor(t, c, s, time.Minute, "an update of the fixing commit", func() (bool, error) {
		if apimeta.IsStatusConditionTrue(s.Status.Conditions, pulumiv1.StalledCondition) {
			return false, fmt.Errorf("Stalled: %s", conditionsOf(s))
		}
		cu := s.Status.CurrentUpdate
		return cu != nil && cu.Commit == fixed && cu.Generation == gen, nil
	})
	var u autov1alpha1.Update
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: s.Status.CurrentUpdate.Name}, &u); err != nil {
		t.Fatalf("the update the Stack records: %v", err)
	}
}

// TestCrossNamespaceKnownHostsStalls: a knownHosts reference naming another
// namespace stalls the Stack with the field and the namespace before
// anything is derived from it; it used to read the Secret of that name in
// the Stack's own namespace, silently.
func TestCrossNamespaceKnownHostsStalls(t *testing.T) {
	cp := startStackController(t, func(r *controller.StackReconciler) { r.GitHubAPIHosts = []string{"ghe.example.com"} })
	c, ctx := cp.Client, context.Background()
	ns := namespace(t, c)
	for _, sec := range []string{"ssh", "known-hosts"} { // the same-named Secret exists in the Stack's namespace
		if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sec}, StringData: map[string]string{"k": "v"}}); err != nil {
			t.Fatal(err)
		}
	}
	secretRef := func(namespace, name string) pulumiv1.ResourceRef {
		return pulumiv1.ResourceRef{SelectorType: pulumiv1.ResourceSelectorSecret,
			ResourceSelector: pulumiv1.ResourceSelector{SecretRef: &pulumiv1.SecretSelector{Namespace: namespace, Name: name, Key: "k"}}}
	}
	kh := secretRef("kube-system", "known-hosts")
	sshStack := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ssh"}, Spec: pulumiv1.StackSpec{Stack: "dev",
		GitSource: &pulumiv1.GitSource{ProjectRepo: "ssh://git@git.example.com/acme/app.git", Commit: strings.Repeat("3", 40),
			GitAuth: &pulumiv1.GitAuthConfig{SSHAuth: &pulumiv1.SSHAuth{SSHPrivateKey: secretRef("", "ssh"), KnownHosts: &kh}}}}}
	// With --github-api-hosts, an apiURL elsewhere stalls likewise.
	appStack := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Spec: pulumiv1.StackSpec{Stack: "dev",
		GitSource: &pulumiv1.GitSource{ProjectRepo: "https://git.example.com/acme/app.git", Commit: strings.Repeat("4", 40),
			GitAuth: &pulumiv1.GitAuthConfig{GitHubApp: &pulumiv1.GitHubAppAuth{AppID: secretRef("", "ssh"), InstallationID: secretRef("", "ssh"),
				PrivateKey: secretRef("", "ssh"), APIURL: "https://metadata.internal/api/v3"}}}}}
	for _, tc := range []struct {
		s   *pulumiv1.Stack
		say string
	}{
		{sshStack, "gitAuth.sshAuth.knownHosts (namespace kube-system)"},
		{appStack, "host metadata.internal is not one Stackflow may reach for GitHub Apps: api.github.com, and the GitHub Enterprise Server hosts of --github-api-hosts (ghe.example.com)"},
	} {
		t.Run(tc.s.Name, func(t *testing.T) {
			if err := c.Create(ctx, tc.s); err != nil {
				t.Fatal(err)
			}
			waitFor(t, c, tc.s, time.Minute, "the Stack stalled on its spec", func() (bool, error) {
				var ws autov1alpha1.Workspace
				if err := c.Get(ctx, client.ObjectKeyFromObject(tc.s), &ws); !apierrors.IsNotFound(err) {
					return false, fmt.Errorf("a Workspace was derived (%v): %+v", err, ws.Spec.Git)
				}
				st := apimeta.FindStatusCondition(tc.s.Status.Conditions, pulumiv1.StalledCondition)
				return st != nil && st.Reason == pulumiv1.StalledSpecInvalidReason && strings.Contains(st.Message, tc.say), nil
			})
		})
	}
}

// TestPreviewStackDeletionSaysDestroySkippedOnce: a preview Stack with
// destroyOnFinalize, deleted, says in its status that it destroys nothing,
// which sends one DestroySkipped event, then goes — against the real API
// server, whose status write does not wake the Stack (the deletion looks
// again by itself) and whose deletion moves the generation on.
func TestPreviewStackDeletionSaysDestroySkippedOnce(t *testing.T) {
	events := record.NewFakeRecorder(1000)
	cp := startStackController(t, func(r *controller.StackReconciler) { r.Recorder = events })
	c, ctx := cp.Client, context.Background()
	ns := namespace(t, c)
	s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-preview"}, Spec: pulumiv1.StackSpec{Stack: "dev", Preview: true, DestroyOnFinalize: true,
		GitSource: &pulumiv1.GitSource{ProjectRepo: "https://git.example.com/acme/app.git", Commit: strings.Repeat("5", 40)}}}
	if err := c.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, s, time.Minute, "the Stack's finalizer", func() (bool, error) {
		return len(s.Finalizers) > 0, nil
	})
	if err := c.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	substrate.Eventually(t, time.Minute, "the Stack gone", func() (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(s), &pulumiv1.Stack{})
		return apierrors.IsNotFound(err), err
	})
	// Gone: no reconcile can store a status, so none sends an event now.
	var skipped []string
	for len(events.Events) > 0 {
		if ev := <-events.Events; strings.Contains(ev, pulumiv1.EventReasonDestroySkipped) {
			skipped = append(skipped, ev)
		}
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0], "deleted without destroying Pulumi stack dev") {
		t.Fatalf("DestroySkipped events = %q, want one", skipped)
	}
}
