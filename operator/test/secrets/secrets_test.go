package secrets

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
	"github.com/stackflow-io/stackflow/operator/internal/workspace"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/local"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/leaks"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// marker is what the agent writes in place of a secret (agent/redact.go).
const marker = "[secret]"

// maxMessage is the agent's cap on result messages (agent/errors.go).
const maxMessage = 4000

// program is the Pulumi YAML program of a case: record "ok" echoes okEcho and
// exports it as the output "echoed" (output says how); record "bad" echoes
// badEcho in the error failOn makes it fail with.
func program(okEcho, badEcho, output string) string {
	return fmt.Sprintf(`name: secrets
runtime: yaml
config:
  recordName:
    type: string
  failOn:
    type: string
    default: ""
  echo:
    type: string
    default: ""
  pad:
    type: string
    default: ""
resources:
  ok:
    type: stackflowtest:index:Record
    properties:
      name: ${recordName}-ok
      content: ok
      %s
  bad:
    type: stackflowtest:index:Record
    properties:
      name: ${recordName}-bad
      content: bad
      failOn: ${failOn}
      %s
outputs:
  echoed: %s
`, okEcho, badEcho, output)
}

const (
	plainOutput  = "${ok.echoed}"
	secretOutput = "\n    fn::secret: ${ok.echoed}"
)

// leakCase is one path a secret takes to the workspace.
type leakCase struct {
	name string
	// program is the case's Pulumi.yaml, given the planted values.
	program func(v values) string
	// plant creates what the Stack reads the secret from and points the Stack
	// at it.
	plant func(t *testing.T, ns string, s *pulumiv1.Stack, v values)
	// git serves the program over smart HTTP requiring v.secret as the
	// password, instead of a file:// URL.
	git bool
	// truncated: the raw message is longer than the agent's cap, which falls
	// inside the secret.
	truncated bool
	// search are the texts that must appear nowhere (default: v.secret).
	search func(v values) []string
}

// values are a case's planted values.
type values struct {
	secret string // the secret, as the program or the Stack's objects hold it
	other  string // a second secret, for list outputs
	number string // a secret number's JSON text
	pad    string // filler before the secret in the truncation case
}

func TestSecretsNeverLeak(t *testing.T) {
	start := time.Now()
	ctx := context.Background()
	pe := substrate.NewPulumi(t)
	root := t.TempDir()
	t.Cleanup(func() { local.StopAll(root) })
	opts := operator.Options{
		Runtime: operator.RuntimeLocal, LocalRoot: root, AgentBinary: agentBin,
		PulumiRoot: pe.Paths.PulumiRoot, AgentEnv: pe.EnvVars(), WorkspaceWorkers: 4, UpdateWorkers: 4,
		ArtifactDir: t.TempDir(), StackResyncOverride: time.Second,
	}
	operatortest.StartOperator(t, cp.Config, opts)
	ns := cp.Namespace(t)

	secretObj := func(t *testing.T, name string, data map[string]string) {
		t.Helper()
		if err := cp.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data}); err != nil {
			t.Fatal(err)
		}
	}
	secretRef := func(name, key string) pulumiv1.ResourceRef {
		return pulumiv1.ResourceRef{SelectorType: pulumiv1.ResourceSelectorSecret,
			ResourceSelector: pulumiv1.ResourceSelector{SecretRef: &pulumiv1.SecretSelector{Name: name, Key: key}}}
	}
	fromConfig := func(values) string { return program("echo: ${echo}", "echo: ${echo}", plainOutput) }
	fromEnv := func(name string) func(values) string {
		return func(values) string { return program("echoEnv: "+name, "echoEnv: "+name, plainOutput) }
	}
	literal := func(yaml func(v values) string) func(values) string {
		return func(v values) string { return program("echo: "+yaml(v), "echo: "+yaml(v), secretOutput) }
	}
	gitCreds := func(t *testing.T, s *pulumiv1.Stack, auth *pulumiv1.GitAuthConfig, data map[string]string) {
		secretObj(t, s.Name+"-git", data)
		s.Spec.GitAuth = auth
	}

	cases := []leakCase{
		{name: "secretsref", program: fromConfig, plant: func(t *testing.T, ns string, s *pulumiv1.Stack, v values) {
			secretObj(t, s.Name, map[string]string{"echo": v.secret})
			s.Spec.SecretRefs = map[string]pulumiv1.ResourceRef{"echo": secretRef(s.Name, "echo")}
		}},
		{name: "secrets-deprecated", program: fromConfig, plant: func(t *testing.T, ns string, s *pulumiv1.Stack, v values) {
			s.Spec.Secrets = map[string]string{"echo": v.secret}
		}},
		{name: "envrefs", program: fromEnv("SF_ECHO_REF"), plant: func(t *testing.T, ns string, s *pulumiv1.Stack, v values) {
			secretObj(t, s.Name, map[string]string{"value": v.secret})
			s.Spec.EnvRefs = map[string]pulumiv1.ResourceRef{"SF_ECHO_REF": secretRef(s.Name, "value")}
		}},
		{name: "envsecrets-deprecated", program: fromEnv("SF_ECHO_DEP"), plant: func(t *testing.T, ns string, s *pulumiv1.Stack, v values) {
			secretObj(t, s.Name, map[string]string{"SF_ECHO_DEP": v.secret})
			s.Spec.SecretEnvs = []string{s.Name}
		}},
		{name: "template-envfrom", program: fromEnv("TPL_SF_ECHO"), plant: func(t *testing.T, ns string, s *pulumiv1.Stack, v values) {
			secretObj(t, s.Name, map[string]string{"SF_ECHO": v.secret})
			s.Spec.WorkspaceTemplate = &pulumiv1.WorkspaceTemplate{Spec: &autov1alpha1.WorkspaceSpec{EnvFrom: []corev1.EnvFromSource{{
				Prefix: "TPL_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: s.Name}}}}}}
		}},
		{name: "git-basicauth", git: true, program: fromEnv("GIT_PASSWORD"), plant: func(t *testing.T, ns string, s *pulumiv1.Stack, v values) {
			gitCreds(t, s, &pulumiv1.GitAuthConfig{BasicAuth: &pulumiv1.BasicAuth{
				UserName: secretRef(s.Name+"-git", "user"), Password: secretRef(s.Name+"-git", "password")}},
				map[string]string{"user": "stackflow", "password": v.secret})
		}},
		{name: "git-token", git: true, program: fromEnv("GIT_TOKEN"), plant: func(t *testing.T, ns string, s *pulumiv1.Stack, v values) {
			ref := secretRef(s.Name+"-git", "token")
			gitCreds(t, s, &pulumiv1.GitAuthConfig{PersonalAccessToken: &ref}, map[string]string{"token": v.secret})
		}},
		{name: "output-string", program: literal(func(v values) string { return fmt.Sprintf("%q", v.secret) })},
		{name: "output-number", program: literal(func(v values) string { return v.number }),
			search: func(v values) []string { return []string{v.number} }},
		{name: "output-object", program: literal(func(v values) string { return fmt.Sprintf("{key: %q}", v.secret) })},
		{name: "output-list", program: literal(func(v values) string { return fmt.Sprintf("[%q, %q]", v.secret, v.other) }),
			search: func(v values) []string { return []string{v.secret, v.other} }},
		// An environment secret, which the engine cannot mask before the
		// agent (it masks secret configuration itself), after a pad.
		{name: "truncated", truncated: true,
			program: func(values) string {
				return program("echoEnv: SF_ECHO_LONG", "echo: ${pad}\n      echoEnv: SF_ECHO_LONG", plainOutput)
			},
			plant: func(t *testing.T, ns string, s *pulumiv1.Stack, v values) {
				secretObj(t, s.Name, map[string]string{"value": v.secret})
				s.Spec.EnvRefs = map[string]pulumiv1.ResourceRef{"SF_ECHO_LONG": secretRef(s.Name, "value")}
				s.Spec.Config["pad"] = jsonValue(v.pad)
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := values{secret: randomString(t, 32), other: randomString(t, 32), number: randomNumber(t)}
			if tc.truncated {
				// Long enough that the cap falls inside it wherever the
				// engine's prefix puts it; the pad puts its start ~300
				// bytes before the cap.
				v.secret = randomString(t, 600)
				v.pad = strings.Repeat("p", maxMessage-300)
			}
			s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tc.name}, Spec: pulumiv1.StackSpec{
				Stack: tc.name, Config: map[string]apiextensionsv1.JSON{"recordName": jsonValue(tc.name)},
			}}
			var sha, url string
			if tc.git {
				repoRoot := t.TempDir()
				repo := gitrepo.NewIn(t, repoRoot, "program.git")
				sha = repo.Commit(t, "program", map[string]string{"Pulumi.yaml": tc.program(v)})
				url = serveGit(t, repoRoot, v.secret) + "/program.git"
			} else {
				repo := gitrepo.New(t)
				sha = repo.Commit(t, "program", map[string]string{"Pulumi.yaml": tc.program(v)})
				url = repo.URL()
			}
			s.Spec.GitSource = &pulumiv1.GitSource{ProjectRepo: url, Commit: sha}
			if tc.plant != nil {
				tc.plant(t, ns, s, v)
			}
			if err := cp.Client.Create(ctx, s); err != nil {
				t.Fatal(err)
			}

			// An update that succeeds: the output holding the secret.
			waitStack(t, s, 5*time.Minute, "deployed", func(s *pulumiv1.Stack) bool {
				return s.Status.LastUpdate != nil && s.Status.LastUpdate.State == pulumiv1.SucceededStackStateMessage
			})
			if got := string(s.Status.Outputs["echoed"].Raw); got != `"`+marker+`"` {
				t.Errorf("output echoed shown as %s, want %q", got, marker)
			}
			first := s.Status.LastUpdate.Name

			// An update whose provider error echoes the secret.
			mutate(t, s, func() { s.Spec.Config["failOn"] = jsonValue("always") })
			waitStack(t, s, 5*time.Minute, "failed", func(s *pulumiv1.Stack) bool {
				lu := s.Status.LastUpdate
				return lu != nil && lu.Name != first && lu.State == pulumiv1.FailedStackStateMessage
			})
			msg := s.Status.LastUpdate.Message
			// Not vacuous: the provider's error, with the secret replaced,
			// is what the Update reports.
			if !strings.Contains(msg, "update refused; echoed ") || !strings.Contains(msg, marker) {
				t.Errorf("the failed update's message does not show the redacted echo: %q", msg)
			}
			if tc.truncated {
				// The secret started before the cap and ended after it, so a
				// redactor run after truncating would have missed it.
				at := strings.Index(msg, v.pad)
				t.Logf("message of %d bytes, the pad at %d", len(msg), at)
				if at < 0 || at+len(v.pad) >= maxMessage || at+len(v.pad)+len(v.secret) <= maxMessage {
					t.Fatalf("the pad is at %d of the message: the cap (%d) does not fall inside the secret", at, maxMessage)
				}
			}
			search := []string{v.secret}
			if tc.search != nil {
				search = tc.search(v)
			}
			assertNowhere(t, ns, s, root, search)
		})
	}
	t.Cleanup(func() { t.Logf("Took %s", time.Since(start).Round(time.Second)) })
}

// serveGit serves the bare repositories under root with git's smart HTTP
// protocol on loopback, to clients giving password (any user name), and
// returns its base URL.
func serveGit(t *testing.T, root, password string) string {
	t.Helper()
	backend, err := gitrepo.Handler(root)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pass, ok := r.BasicAuth(); !ok || pass != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// assertNowhere fails when a value, or the agent's token, leaks (by the
// rule of test/framework/leaks: the value, its parts, its JSON, URL and
// base64 forms) into an Update's status, the Stack's status, an event of the
// namespace, the operator's log or the Stack's agent log.
func assertNowhere(t *testing.T, ns string, s *pulumiv1.Stack, root string, values []string) {
	t.Helper()
	ctx := context.Background()
	texts := map[string]string{}
	var updates autov1alpha1.UpdateList
	if err := cp.Client.List(ctx, &updates, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, u := range updates.Items {
		b, _ := json.Marshal(u.Status)
		texts["update "+u.Name] = string(b)
	}
	b, _ := json.Marshal(s.Status)
	texts["stack status"] = string(b)
	var events corev1.EventList
	if err := cp.Client.List(ctx, &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(events)
	texts["events"] = string(b)
	texts["operator log"] = operatorLog.String()
	agentLog := filepath.Join(root, ns, s.Name, "agent.log")
	b, err := os.ReadFile(agentLog)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), marker) {
		t.Fatalf("the agent log %s shows no redacted value: is it the log of this Stack's agent?", agentLog)
	}
	texts["agent log"] = string(b)
	// The workspace agent's bearer token is never logged or reported either.
	var ws autov1alpha1.Workspace
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: s.Name}, &ws); err != nil {
		t.Fatal(err)
	}
	var tok corev1.Secret
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: workspace.TokenSecretName(&ws)}, &tok); err != nil || len(tok.Data["token"]) == 0 {
		t.Fatalf("the workspace's agent token Secret: %v", err)
	}
	values = append(values[:len(values):len(values)], string(tok.Data["token"]))
	leaks.AssertNone(t, values, texts)
}

func waitStack(t *testing.T, s *pulumiv1.Stack, timeout time.Duration, what string, cond func(*pulumiv1.Stack) bool) {
	t.Helper()
	substrate.Eventually(t, timeout, s.Name+" "+what, func() (bool, error) {
		if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(s), s); err != nil {
			return false, err
		}
		ready := apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.ReadyCondition)
		b, _ := json.Marshal(ready)
		return cond(s), fmt.Errorf("ready condition %s", b)
	})
}

// mutate applies change to the current obj, retrying on conflicts with the
// operator's status patches.
func mutate(t *testing.T, obj client.Object, change func()) {
	t.Helper()
	substrate.Eventually(t, 30*time.Second, "update "+obj.GetName(), func() (bool, error) {
		if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		change()
		err := cp.Client.Update(context.Background(), obj)
		return err == nil, err
	})
}

func jsonValue(v any) apiextensionsv1.JSON {
	b, _ := json.Marshal(v)
	return apiextensionsv1.JSON{Raw: b}
}

const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

func randomString(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	for i := range b {
		k, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			t.Fatal(err)
		}
		b[i] = alphabet[k.Int64()]
	}
	return string(b)
}

// randomNumber is a random 15-digit integer (exact as a JSON number).
func randomNumber(t *testing.T) string {
	t.Helper()
	k, err := rand.Int(rand.Reader, big.NewInt(9e14))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(k.Int64() + 1e14)
}
