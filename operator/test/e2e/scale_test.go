package e2e

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/webhook"
	"github.com/stackflow-io/stackflow/operator/test/gitrepo"
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
	post := func(sig string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+op.WebhookAddr+"/webhooks/github", bytes.NewReader(body))
		req.Header.Set("X-GitHub-Event", "push")
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
	time.Sleep(3 * time.Second)
	if err := get(t, s); err != nil {
		t.Fatal(err)
	}
	if s.Status.LastUpdate.LastAttemptedCommit != sha1 {
		t.Fatalf("a refused push triggered a deployment of %s", s.Status.LastUpdate.LastAttemptedCommit)
	}
	start := time.Now()
	if code := post(webhook.Sign([]byte(secret), body)); code != http.StatusAccepted {
		t.Fatalf("signed push: HTTP %d", code)
	}
	waitStack(t, s, 30*time.Second, "deployed after the push", readyAt(sha2))
	t.Logf("pushed commit deployed %s after the notification", time.Since(start).Round(100*time.Millisecond))
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
	time.Sleep(2 * time.Second)
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
