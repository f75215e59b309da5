package akuity

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/stackflow-io/stackflow/analysis/verification"
	"github.com/stackflow-io/stackflow/kargo-steps/cli"
)

// step is the part of a CustomPromotionStep the tests read.
type step struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Image   string   `json:"image"`
		Command []string `json:"command"`
		Env     []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"env"`
		Output struct {
			Source string `json:"source"`
			Format string `json:"format"`
		} `json:"output"`
		DefaultTimeout        string `json:"defaultTimeout"`
		DefaultErrorThreshold int    `json:"defaultErrorThreshold"`
	} `json:"spec"`
}

func steps(t *testing.T) map[string]step {
	t.Helper()
	b, err := os.ReadFile("custompromotionsteps.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]step{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var s step
		if err := dec.Decode(&s); err != nil {
			break
		}
		if s.Kind == "" {
			continue
		}
		if s.APIVersion != "ee.kargo.akuity.io/v1alpha1" || s.Kind != "CustomPromotionStep" || s.Spec.Output.Source != "File" || s.Spec.Output.Format != "JSON" {
			t.Fatalf("%s: %+v", s.Metadata.Name, s)
		}
		out[s.Metadata.Name] = s
	}
	if len(out) != 2 {
		t.Fatalf("%d steps", len(out))
	}
	return out
}

var configExpr = regexp.MustCompile(`^\$\{\{ config\.([a-zA-Z]+) \}\}$`)

// run runs the step the way the platform would: env templated from config
// (a missing key is empty), the command's arguments, $KARGO_OUTPUT.
func run(t *testing.T, s step, config map[string]string) (int, map[string]any, string) {
	t.Helper()
	if s.Spec.Command[0] != "/stackflow-kargo" {
		t.Fatalf("command %v", s.Spec.Command)
	}
	for _, e := range s.Spec.Env {
		m := configExpr.FindStringSubmatch(e.Value)
		if m == nil || !strings.HasPrefix(e.Name, cli.EnvPrefix) {
			t.Fatalf("env %s=%s: expected %sX = ${{ config.x }}", e.Name, e.Value, cli.EnvPrefix)
		}
		t.Setenv(e.Name, config[m[1]])
	}
	out := filepath.Join(t.TempDir(), "output.json")
	t.Setenv(cli.OutputEnv, out)
	var stdout, stderr bytes.Buffer
	code := cli.Main(context.Background(), s.Spec.Command[1:], &stdout, &stderr)
	var o map[string]any
	if b, err := os.ReadFile(out); err == nil {
		if err := json.Unmarshal(b, &o); err != nil {
			t.Fatalf("output %s: %v", b, err)
		}
	}
	return code, o, stdout.String() + stderr.String()
}

func TestWaitStep(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/namespaces/dev/stacks/web/verification" || r.URL.Query().Get("operation") != "preview" || r.Header.Get("Authorization") != "Bearer project-token" {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(verification.Result{Phase: verification.PhaseSucceeded, Reason: verification.ReasonUpdateSucceeded, Message: "preview succeeded",
			Update: &verification.Update{Name: "web-4", Permalink: "https://example.com/web/4"}})
	}))
	defer srv.Close()
	code, out, log := run(t, steps(t)["stackflow-wait"], map[string]string{"url": srv.URL, "namespace": "dev", "stack": "web",
		"commit": "0123456789abcdef0123456789abcdef01234567", "operation": "preview", "timeout": "1m", "token": "project-token"})
	if code != cli.ExitOK || out["succeeded"] != true || out["update"] != "web-4" || out["permalink"] != "https://example.com/web/4" {
		t.Fatalf("exit %d, output %v: %s", code, out, log)
	}
}

// TestWaitStepStackNotFoundGrace: the step's stackNotFoundGrace reaches the
// service as notFoundAfter (the default 5m when the config has none), and a
// Stack that does not exist fails the step once it has passed, naming the
// Stack, in the step's output.
func TestWaitStepStackNotFoundGrace(t *testing.T) {
	var mu sync.Mutex
	var sent []time.Time
	// The service's answer about a Stack that does not exist, to the query
	// the step sent.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := verification.ParseQuery(r.URL.Query())
		if err != nil || q.NotFoundAfter.IsZero() {
			http.Error(w, fmt.Sprintf("no notFoundAfter in %s: %v", r.URL, err), http.StatusBadRequest)
			return
		}
		mu.Lock()
		sent = append(sent, q.NotFoundAfter)
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(verification.Verify(verification.Input{Namespace: "dev", Name: "web-typo", Query: q, Now: time.Now()}))
	}))
	defer srv.Close()
	config := map[string]string{"url": srv.URL, "namespace": "dev", "stack": "web-typo",
		"commit": "0123456789abcdef0123456789abcdef01234567", "timeout": "1m", "token": "project-token", "stackNotFoundGrace": "1s"}
	start := time.Now()
	code, out, log := run(t, steps(t)["stackflow-wait"], config)
	took := time.Since(start)
	if code != cli.ExitFailed || out["reason"] != verification.ReasonStackNotFound || !strings.Contains(fmt.Sprint(out["message"]), "Stack dev/web-typo does not exist") {
		t.Fatalf("exit %d, output %v: %s", code, out, log)
	}
	if took > 10*time.Second {
		t.Fatalf("the step failed after %s, want about 2 s (a grace of 1s)", took)
	}
	// Without stackNotFoundGrace in the config, the default: 5 minutes. The
	// timeout ends this wait first.
	delete(config, "stackNotFoundGrace")
	config["timeout"] = "1s"
	mu.Lock()
	sent = nil
	mu.Unlock()
	start = time.Now().Truncate(time.Second)
	if code, out, log := run(t, steps(t)["stackflow-wait"], config); code != cli.ExitFailed || out["reason"] != "Timeout" {
		t.Fatalf("exit %d, output %v: %s", code, out, log)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) == 0 || sent[0].Before(start.Add(cli.DefaultStackNotFoundGrace)) || sent[0].After(time.Now().Add(cli.DefaultStackNotFoundGrace)) {
		t.Fatalf("notFoundAfter %v, want the start plus %s", sent, cli.DefaultStackNotFoundGrace)
	}
}

func TestSetCommitStep(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "web.yaml")
	manifest := "apiVersion: pulumi.com/v1\nkind: Stack\nmetadata:\n  name: web\nspec:\n  stack: web\n  projectRepo: https://example.com/infra.git\n  branch: main\n"
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	sha := "0123456789abcdef0123456789abcdef01234567"
	// No namespace in the config: the variable is empty, the flag unset.
	code, out, log := run(t, steps(t)["stackflow-set-commit"], map[string]string{"path": dir, "stack": "web", "commit": sha})
	if code != cli.ExitOK || out["changed"] != true || out["commit"] != sha || out["branchRemoved"] != true {
		t.Fatalf("exit %d, output %v: %s", code, out, log)
	}
	if b, _ := os.ReadFile(file); !strings.Contains(string(b), "commit: "+sha) || strings.Contains(string(b), "branch:") {
		t.Fatalf("file:\n%s", b)
	}
}
