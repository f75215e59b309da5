package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/controller"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/webhook"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

// TestPushWebhookDeploysInSeconds: with polling relaxed to an hour, a signed
// push notification makes the Stack deploy the pushed commit in seconds; an
// unsigned one is refused and triggers nothing.
func TestPushWebhookDeploysInSeconds(t *testing.T) {
	e := newEnv(t)
	secret := "push-secret"
	e.opts.GitPollInterval = time.Hour
	e.opts.WebhookAddr, e.opts.WebhookSecret = "127.0.0.1:0", secret
	op, _ := startOperatorWith(t, e.opts)
	repo := gitrepo.New(t)
	sha1 := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})
	s := newStack(e.ns, "pushed", pulumiv1.StackSpec{Stack: "pushed", GitSource: gitSpec(repo.URL(), "main", ""),
		Config: cfg("recordName", "pushed", "content", "push-content")})
	if err := cp.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitStack(t, s, 3*time.Minute, "ready at the first commit", readyAt(sha1))
	sha2 := repo.Commit(t, "v2", map[string]string{"README.md": "second"})

	body := []byte(`{"ref":"refs/heads/main","repository":{"clone_url":"` + repo.URL() + `","html_url":"https://example.com/acme/infra"}}`)
	delivery := "72d3162e-cc78-11e3-81ab-4c9367dc0958"
	post := func(sig string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+op.WebhookAddr+"/webhooks/github", bytes.NewReader(body))
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-GitHub-Delivery", delivery)
		if sig != "" {
			req.Header.Set("X-Hub-Signature-256", sig)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(""); code != http.StatusUnauthorized {
		t.Fatalf("unsigned push: HTTP %d", code)
	}
	if code := post(webhook.Sign([]byte("wrong"), body)); code != http.StatusUnauthorized {
		t.Fatalf("badly signed push: HTTP %d", code)
	}
	// The receiver answers after recording a push: a refused one recorded
	// nothing.
	if err := get(t, s); err != nil {
		t.Fatal(err)
	}
	if v, ok := s.Annotations[controller.PushAnnotation]; ok {
		t.Fatalf("a refused push was recorded: %s=%s", controller.PushAnnotation, v)
	}
	start := time.Now()
	if code := post(webhook.Sign([]byte(secret), body)); code != http.StatusAccepted {
		t.Fatalf("signed push: HTTP %d", code)
	}
	if err := get(t, s); err != nil {
		t.Fatal(err)
	}
	if s.Annotations[controller.PushAnnotation] == "" {
		t.Fatalf("the accepted push was not recorded on the Stack (%s)", controller.PushAnnotation)
	}
	waitStack(t, s, 2*time.Minute, "deployed after the push", readyAt(sha2)) // the poll interval is an hour
	t.Logf("pushed commit deployed %s after the notification", time.Since(start).Round(100*time.Millisecond))
	// The same delivery again is a replay. (The refused ones above were not
	// remembered: the accepted post used their delivery ID.)
	if code := post(webhook.Sign([]byte(secret), body)); code != http.StatusConflict {
		t.Fatalf("replayed push: HTTP %d, want 409", code)
	}
	// The delivery ID is not signed: the captured payload under a new one
	// is a replay too.
	delivery = "0b1e5c1a-0000-4000-8000-000000000001"
	if code := post(webhook.Sign([]byte(secret), body)); code != http.StatusConflict {
		t.Fatalf("push replayed under a new delivery ID: HTTP %d, want 409", code)
	}
}

// TestNamespaceScopedOperator: an operator watching one namespace reconciles
// Stacks there and leaves other namespaces alone.
func TestNamespaceScopedOperator(t *testing.T) {
	e := newEnv(t)
	other := cp.Namespace(t)
	e.opts.WatchNamespaces = []string{e.ns}
	e.opts.StackResyncOverride = time.Second
	startOperator(t, e.opts)
	repo := gitrepo.New(t)
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})
	mine := newStack(e.ns, "mine", pulumiv1.StackSpec{Stack: "mine", GitSource: gitSpec(repo.URL(), "", sha), Config: cfg("recordName", "mine", "content", "watched")})
	theirs := newStack(other, "theirs", pulumiv1.StackSpec{Stack: "theirs", GitSource: gitSpec(repo.URL(), "", sha), Config: cfg("recordName", "theirs", "content", "ignored")})
	for _, s := range []*pulumiv1.Stack{mine, theirs} {
		if err := cp.Client.Create(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	waitStack(t, mine, 3*time.Minute, "ready", readyAt(sha))
	// The operator's cache, built from the same options, cannot even hold a
	// Stack outside the watched namespace: that is why theirs is never
	// reconciled (checked below once mine, created with it, is deployed).
	c, err := cache.New(cp.Config, func() cache.Options {
		o := operator.CacheOptions(e.opts.WatchNamespaces)
		o.Scheme = operator.Scheme()
		return o
	}())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(theirs), &pulumiv1.Stack{}); err == nil ||
		!strings.Contains(err.Error(), "unknown namespace for the cache") {
		t.Fatalf("the operator's cache reads a Stack in an unwatched namespace: err = %v", err)
	}
	if err := get(t, theirs); err != nil {
		t.Fatal(err)
	}
	if len(theirs.Status.Conditions) != 0 || len(theirs.Finalizers) != 0 {
		t.Fatalf("a Stack outside the watched namespace was reconciled: %+v", theirs.Status)
	}
	if _, ok := e.pe.Record(t, "theirs"); ok {
		t.Fatal("a Stack outside the watched namespace was deployed")
	}
}

// TestDriftDetection: an out-of-band edit is reported as DriftDetected without
// touching the infrastructure; with remediate, an up with refresh restores it
// and clears the condition.
func TestDriftDetection(t *testing.T) {
	e, repo := stackEnv(t)
	ctx := context.Background()
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})
	s := newStack(e.ns, "drifty", pulumiv1.StackSpec{Stack: "drifty", GitSource: gitSpec(repo.URL(), "", sha),
		DriftDetection: &pulumiv1.DriftDetection{},
		Config:         cfg("recordName", "drifty", "content", "desired")})
	if err := cp.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	waitStack(t, s, 3*time.Minute, "ready", readyAt(sha))
	if err := os.WriteFile(filepath.Join(e.pe.RecordsDir, "drifty"), []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitStack(t, s, 2*time.Minute, "drift detected", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.DriftDetectedCondition)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "1 resource(s) differ") && strings.Contains(c.Message, "update 1") &&
			strings.Contains(c.Message, "update stackflowtest:index:Record::rec")
	})
	if got, _ := e.pe.Record(t, "drifty"); got != "tampered" {
		t.Fatalf("detection changed the infrastructure: record = %q", got)
	}
	if s.Status.LastUpdate.Type != "up" || condition(s, pulumiv1.ReadyCondition).Status != metav1.ConditionTrue {
		t.Fatalf("a drift check replaced the last update or readiness: %+v", s.Status.LastUpdate)
	}
	var events corev1.EventList
	_ = cp.Client.List(ctx, &events, client.InNamespace(e.ns))
	found := false
	for _, ev := range events.Items {
		found = found || (ev.Reason == "DriftDetected" && ev.Type == corev1.EventTypeWarning)
	}
	if !found {
		t.Fatal("no DriftDetected event")
	}

	// Drift found without remediate leaves nothing pending, and a deploy
	// never adds refresh on its own.
	if s.Status.DriftCheck == nil || s.Status.DriftCheck.RemediationPending {
		t.Fatalf("driftCheck = %+v: a remediation is pending without remediate", s.Status.DriftCheck)
	}
	// Checks run every second here; their Updates do not pile up.
	before := s.Status.UpdateSequence
	waitStack(t, s, 2*time.Minute, "ten more drift checks", func(s *pulumiv1.Stack) bool { return s.Status.UpdateSequence >= before+10 })
	eventually(t, time.Minute, "old drift checks deleted", func() (bool, error) {
		var list autoUpdateList
		if err := cp.Client.List(ctx, &list.UpdateList, client.InNamespace(e.ns)); err != nil {
			return false, err
		}
		checks := 0
		for _, u := range list.Items {
			if u.Annotations["stackflow.io/purpose"] == string(pulumiv1.UpdatePurposeDriftCheck) && u.DeletionTimestamp == nil {
				checks++
			}
		}
		return checks <= 2, fmt.Errorf("%d drift-check Updates kept", checks)
	})

	mutateStack(t, s, func(s *pulumiv1.Stack) { s.Spec.DriftDetection.Remediate = true })
	var remediation autov1alpha1.Update
	waitStack(t, s, 3*time.Minute, "remediated", func(s *pulumiv1.Stack) bool {
		if condition(s, pulumiv1.DriftDetectedCondition) != nil || !readyAt(sha)(s) {
			return false
		}
		remediation = autov1alpha1.Update{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: s.Status.LastUpdate.Name}}
		return get(t, &remediation) == nil && remediation.Annotations["stackflow.io/purpose"] == string(pulumiv1.UpdatePurposeRemediate)
	})
	if remediation.Spec.Refresh == nil || !*remediation.Spec.Refresh || remediation.Spec.Type != autov1alpha1.UpType {
		t.Fatalf("remediation %s spec = %+v, want an up with refresh", remediation.Name, remediation.Spec)
	}
	if got, _ := e.pe.Record(t, "drifty"); got != "desired" {
		t.Fatalf("remediation left record = %q", got)
	}
	// Only the remediation refreshed: the deploys (the first, and the one for
	// the spec change, which ran while drift was reported) did not.
	var list autoUpdateList
	if err := cp.Client.List(ctx, &list.UpdateList, client.InNamespace(e.ns)); err != nil {
		t.Fatal(err)
	}
	deploys := 0
	for _, u := range list.Items {
		if u.Annotations["stackflow.io/purpose"] == string(pulumiv1.UpdatePurposeDeploy) {
			deploys++
			if u.Spec.Refresh != nil && *u.Spec.Refresh {
				t.Fatalf("deploy %s refreshed: only a remediation adds refresh", u.Name)
			}
		}
	}
	if deploys != 2 {
		t.Fatalf("%d deploy Updates, want 2", deploys)
	}
}
