//go:build cluster

package clustere2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/workspace"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	"github.com/stackflow-io/stackflow/test/framework/leaks"
)

// redactionMarker is what the agent writes in place of a secret
// (operator/internal/agent/redact.go).
const redactionMarker = "[secret]"

// echoEnvProgram has the test provider echo the environment variable
// SF_API_KEY: record "ok" returns it as its output "echoed", exported in
// clear; record "bad" repeats it in the error failOn makes it fail with. The
// engine does not know the value is secret: only the agent's redaction of
// the variables it was told come from Secrets keeps it out.
const echoEnvProgram = `name: redaction
runtime: yaml
config:
  recordName:
    type: string
  content:
    type: string
  failOn:
    type: string
    default: ""
resources:
  ok:
    type: stackflowtest:index:Record
    properties:
      name: ${recordName}-ok
      content: ${content}
      echoEnv: SF_API_KEY
  bad:
    type: stackflowtest:index:Record
    properties:
      name: ${recordName}-bad
      content: bad
      failOn: ${failOn}
      echoEnv: SF_API_KEY
outputs:
  echoed: ${ok.echoed}
`

// TestEnvFromSecretIsRedacted: a Stack whose workspace container gets a
// Secret through envFrom, under the pod runtime of the operator installed
// from the chart (workspaceAuth token), on the real kubelet. The operator
// lists the Secret's keys for the agent (STACKFLOW_SECRET_ENV); the
// provider echoes the variable in an output and in an error; the value
// leaks (test/framework/leaks's rule) into no Update's status, the Stack's
// status, the namespace's events, nor the logs (read through the API) of the
// workspace pod and the operator pod, where the agent's redaction marker
// stands instead. The agent's token leaks nowhere either.
func TestEnvFromSecretIsRedacted(t *testing.T) {
	ctx := context.Background()
	ns := restrictedNamespace(t)
	stateVolume(t, ns)
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	secret := "sfkey-" + hex.EncodeToString(b)
	if err := testClient.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"},
		StringData: map[string]string{"SF_API_KEY": secret},
	}); err != nil {
		t.Fatal(err)
	}

	repo, srv := servedRepo(t)
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": echoEnvProgram})

	release := installChart(t, ns, nil)
	op := waitOperatorPod(t, release)

	s := workspaceStack(ns, "redact", &pulumiv1.GitSource{ProjectRepo: repo.HTTPURL(srv), Branch: "main"})
	c := &s.Spec.WorkspaceTemplate.Spec.PodTemplate.Spec.Containers[0]
	c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "api"}}}}
	if err := testClient.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	deleteStackAtEnd(t, s)
	waitStack(t, s, 4*time.Minute, "ready at the commit", readyAt(sha))
	if got := string(s.Status.Outputs["echoed"].Raw); got != `"`+redactionMarker+`"` {
		t.Errorf("output echoed shown as %s, want %q", got, redactionMarker)
	}
	first := s.Status.LastUpdate.Name

	// The variable's name reached the agent as one to redact.
	var wp corev1.Pod
	if err := testClient.Get(ctx, clientKey(ns, pod.PodName(s.Name)), &wp); err != nil {
		t.Fatal(err)
	}
	var listed string
	for _, c := range wp.Spec.Containers {
		for _, e := range c.Env {
			if c.Name == pod.ContainerName && e.Name == pod.SecretEnvNamesVar {
				listed = e.Value
			}
		}
	}
	if !strings.Contains(","+listed+",", ",SF_API_KEY,") {
		t.Errorf("%s = %q, want SF_API_KEY listed", pod.SecretEnvNamesVar, listed)
	}

	// An update whose provider error echoes the value.
	mutateStack(t, s, func() { s.Spec.Config["failOn"] = jsonString("always") })
	waitStack(t, s, 4*time.Minute, "failed", func(s *pulumiv1.Stack) bool {
		lu := s.Status.LastUpdate
		return lu != nil && lu.Name != first && lu.State == pulumiv1.FailedStackStateMessage
	})
	if msg := s.Status.LastUpdate.Message; !strings.Contains(msg, "update refused; echoed") || !strings.Contains(msg, redactionMarker) {
		t.Errorf("the failed update's message does not show the redacted echo: %q", msg)
	}

	texts := map[string]string{}
	var updates autov1alpha1.UpdateList
	if err := testClient.List(ctx, &updates, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, u := range updates.Items {
		b, _ := json.Marshal(u.Status)
		texts["update "+u.Name] = string(b)
	}
	b, _ = json.Marshal(s.Status)
	texts["stack status"] = string(b)
	var events corev1.EventList
	if err := testClient.List(ctx, &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(events.Items)
	texts["events"] = string(b)
	for _, p := range []corev1.Pod{wp, *op} {
		for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			log, err := testCluster.Client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(ctx)
			if err != nil {
				t.Fatalf("logs of %s/%s: %v", p.Name, c.Name, err)
			}
			texts["log of "+p.Name+"/"+c.Name] = string(log)
		}
	}
	// Not vacuous: the agent logged the engine's output with the value
	// replaced.
	if agentLog := texts["log of "+wp.Name+"/"+pod.ContainerName]; !strings.Contains(agentLog, redactionMarker) {
		t.Errorf("the agent's log shows no redacted value:\n%s", agentLog)
	}
	search := []string{secret}
	var ws autov1alpha1.Workspace
	if err := testClient.Get(ctx, clientKey(ns, s.Name), &ws); err != nil {
		t.Fatal(err)
	}
	var tok corev1.Secret
	if err := testClient.Get(ctx, clientKey(ns, workspace.TokenSecretName(&ws)), &tok); err != nil || len(tok.Data["token"]) == 0 {
		t.Fatalf("the workspace's agent token Secret: %v", err)
	}
	search = append(search, string(tok.Data["token"]))
	leaks.AssertNone(t, search, texts)
	t.Logf("Searched %d texts: %d Updates' status, the Stack's, %d events, the logs of every container of the workspace and operator pods", len(texts), len(updates.Items), len(events.Items))
}

// mutateStack applies change to the current s, retrying on conflicts with
// the operator's status patches.
func mutateStack(t *testing.T, s *pulumiv1.Stack, change func()) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := testClient.Get(context.Background(), client.ObjectKeyFromObject(s), s); err != nil {
			return err
		}
		change()
		return testClient.Update(context.Background(), s)
	})
	if err != nil {
		t.Fatalf("updating %s: %v", s.Name, err)
	}
}
