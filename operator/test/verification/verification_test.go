package verification

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	analysisutil "github.com/argoproj/argo-rollouts/utils/analysis"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	analysisconfig "github.com/stackflow-io/stackflow/analysis/config"
	"github.com/stackflow-io/stackflow/analysis/verification"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/provider"
)

// program is a Pulumi YAML program with one test-provider Record; failOn
// makes it fail.
const program = `name: verified
runtime: yaml
config:
  failOn:
    type: string
    default: ""
resources:
  rec:
    type: stackflowtest:index:Record
    properties:
      name: ${pulumi.stack}
      content: v1
      failOn: ${failOn}
`

func raw(v any) apiextensionsv1.JSON {
	b, _ := json.Marshal(v)
	return apiextensionsv1.JSON{Raw: b}
}

// scenario is a Stack and the AnalysisRun verifying it.
type scenario struct {
	name     string
	template string
	stack    *pulumiv1.Stack
	commit   string
	// timeoutMeasurements overrides the template's deadline.
	timeoutMeasurements string
	want                rolloutsv1alpha1.AnalysisPhase
	run                 *rolloutsv1alpha1.AnalysisRun
	// done is when the AnalysisRun was first seen completed; verdict when
	// the Stack's terminal failure was first seen (its fifth failure).
	done, verdict time.Time
}

// TestAnalysisRunsFollowStacks: the shipped templates, run by the real Argo
// Rollouts controller against the analysis service, end Successful within
// an interval of the update succeeding (also when the operator's backoff
// retry of a failed update succeeds), Failed within an interval of a terminal failure, and Failed at
// the deadline when the Stack never gets there; a preview verifies with the
// preview template.
func TestAnalysisRunsFollowStacks(t *testing.T) {
	w := newWorld(t, true)
	ctx := context.Background()
	repo := gitrepo.New(t)
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": program})
	other := strings.Repeat("e", 40)

	// The retried Stack's provider writes its record under a path whose
	// parent is a file: the update fails until the test removes the file,
	// and the operator's backoff retry (same commit, same inputs) succeeds.
	blocker := filepath.Join(t.TempDir(), "blocker")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	stack := func(name string, mod func(*pulumiv1.StackSpec)) *pulumiv1.Stack {
		s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
			Spec: pulumiv1.StackSpec{Stack: name, GitSource: &pulumiv1.GitSource{ProjectRepo: repo.URL(), Commit: sha}}}
		if mod != nil {
			mod(&s.Spec)
		}
		return s
	}
	scenarios := []*scenario{
		{name: "applied", template: analysisconfig.AppliedTemplate, stack: stack("applied", nil), commit: sha[:12], want: rolloutsv1alpha1.AnalysisPhaseSuccessful},
		{name: "retried", template: analysisconfig.AppliedTemplate, stack: stack("retried", func(s *pulumiv1.StackSpec) {
			s.Config = map[string]apiextensionsv1.JSON{provider.Name + ":dir": raw(filepath.Join(blocker, "records"))}
		}), commit: sha, want: rolloutsv1alpha1.AnalysisPhaseSuccessful},
		{name: "stalled", template: analysisconfig.AppliedTemplate, stack: stack("stalled", func(s *pulumiv1.StackSpec) {
			s.Config = map[string]apiextensionsv1.JSON{"failOn": raw("create")}
			s.RetryMaxBackoffDurationSeconds = 1
		}), commit: sha, want: rolloutsv1alpha1.AnalysisPhaseFailed},
		{name: "previewed", template: analysisconfig.PreviewedTemplate, stack: stack("previewed", func(s *pulumiv1.StackSpec) { s.Preview = true }), commit: sha, want: rolloutsv1alpha1.AnalysisPhaseSuccessful},
		// The Stack targets another commit: the run fails at its deadline.
		{name: "never", template: analysisconfig.AppliedTemplate, stack: stack("never", nil), commit: other, timeoutMeasurements: "3", want: rolloutsv1alpha1.AnalysisPhaseFailed},
	}
	templates, err := analysisconfig.AnalysisTemplates()
	if err != nil {
		t.Fatal(err)
	}
	for _, tpl := range templates {
		tpl.Namespace = w.ns
		if err := w.c.Create(ctx, tpl); err != nil {
			t.Fatalf("create AnalysisTemplate %s: %v", tpl.Name, err)
		}
	}
	created := time.Now()
	for _, sc := range scenarios {
		if err := w.c.Create(ctx, sc.stack); err != nil {
			t.Fatal(err)
		}
		sc.run = w.analysisRun(t, templates, sc)
	}

	// The retried Stack fails first: its run keeps running (the service
	// says Running, retried), until the knob is fixed.
	retried := scenarios[1]
	waitStack(t, w, retried.stack, 3*time.Minute, "failed once", func(s *pulumiv1.Stack) bool {
		return s.Status.LastUpdate != nil && s.Status.LastUpdate.State == pulumiv1.FailedStackStateMessage
	})
	failedUpdate := retried.stack.Status.LastUpdate.Name
	if got := w.verify(t, w.token, retried.stack.Name, sha, "up"); got.Phase != verification.PhaseRunning || got.Retry == nil || got.Retry.NextTime == nil {
		t.Fatalf("after the failure the service says %s/%s (retry %+v): %s", got.Phase, got.Reason, got.Retry, got.Message)
	}
	t.Run("metrics in process while Running", func(t *testing.T) {
		w.checkMetrics(t, templates, analysisconfig.AppliedTemplate, retried.stack.Name, sha, "Running", waiting)
	})
	if err := get(w, retried.run); err != nil || retried.run.Status.Phase.Completed() {
		t.Fatalf("the run of a failed-and-retried update ended %s (%v)", retried.run.Status.Phase, err)
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}

	// Every run ends; record when.
	eventually(t, 6*time.Minute, "every AnalysisRun completed", func() (bool, error) {
		pending := 0
		for _, sc := range scenarios {
			if !sc.done.IsZero() {
				continue
			}
			if err := get(w, sc.run); err != nil {
				return false, err
			}
			if err := get(w, sc.stack); err != nil {
				return false, err
			}
			if lu := sc.stack.Status.LastUpdate; sc.verdict.IsZero() && lu != nil && lu.Failures >= pulumiv1.RetryStallAfter {
				sc.verdict = time.Now()
			}
			if sc.run.Status.Phase.Completed() {
				sc.done = time.Now()
			} else {
				pending++
			}
		}
		return pending == 0, fmt.Errorf("%d runs not completed", pending)
	})

	interval := analysisconfig.Interval
	for _, sc := range scenarios {
		if sc.run.Status.Phase != sc.want {
			t.Errorf("%s: AnalysisRun %s, want %s: %s", sc.name, sc.run.Status.Phase, sc.want, sc.run.Status.Message)
			continue
		}
		if err := get(w, sc.stack); err != nil {
			t.Fatal(err)
		}
		var since time.Time
		var what string
		switch sc.name {
		case "never":
			// Failed at the deadline, not before: three measurements.
			if took := sc.done.Sub(created); took < 2*interval {
				t.Errorf("never: the run failed after %s, before its deadline of 3 measurements", took)
			}
			t.Logf("never: Failed %s after creation (deadline: 3 measurements of %s)", sc.done.Sub(created).Round(time.Second), interval)
			continue
		case "stalled":
			// The operator retries at the backoff cap (1s here) after the
			// stall, so the Stalled condition comes and goes; the fifth
			// failure is the verdict.
			if sc.verdict.IsZero() {
				t.Errorf("stalled: the run failed before the Stack failed %d times", pulumiv1.RetryStallAfter)
				continue
			}
			since, what = sc.verdict, fmt.Sprintf("failed %d times", pulumiv1.RetryStallAfter)
		default:
			since, what = sc.stack.Status.LastUpdate.LastResyncTime.Time, string(sc.stack.Status.LastUpdate.Type)+" succeeded"
			if sc.name == "retried" && sc.stack.Status.LastUpdate.Name == failedUpdate {
				t.Errorf("retried: the success is the failed update %s", failedUpdate)
			}
		}
		took := sc.done.Sub(since)
		// One interval, plus the second metric's request and our own polling.
		if took > interval+5*time.Second {
			t.Errorf("%s: the run ended %s after the Stack %s: more than one interval (%s)", sc.name, took.Round(100*time.Millisecond), what, interval)
		}
		t.Logf("%s: AnalysisRun %s %s after the Stack %s (the PKO+Kargo example waits a fixed 5m0s)", sc.name, sc.run.Status.Phase, took.Round(100*time.Millisecond), what)
	}

	t.Run("metrics in process", func(t *testing.T) { w.metricsInProcess(t, templates, scenarios, sha, other) })
	t.Run("authentication", func(t *testing.T) { w.authentication(t, sha) })
	t.Run("pulumi cloud", func(t *testing.T) { w.pulumiCloud(t, sha) })
}

// analysisRun creates the AnalysisRun Kargo would create for a Stage's
// verification: the template's metrics with the Stage's args (plain values;
// the token comes from the template's secretKeyRef default).
func (w *world) analysisRun(t *testing.T, templates []*rolloutsv1alpha1.AnalysisTemplate, sc *scenario) *rolloutsv1alpha1.AnalysisRun {
	t.Helper()
	var tpl *rolloutsv1alpha1.AnalysisTemplate
	for _, x := range templates {
		if x.Name == sc.template {
			tpl = x
		}
	}
	str := func(s string) *string { return &s }
	args := []rolloutsv1alpha1.Argument{
		{Name: analysisconfig.ArgNamespace, Value: str(w.ns)}, {Name: analysisconfig.ArgStack, Value: str(sc.stack.Name)},
		{Name: analysisconfig.ArgCommit, Value: str(sc.commit)}, {Name: analysisconfig.ArgServer, Value: str(w.url)},
	}
	if sc.timeoutMeasurements != "" {
		args = append(args, rolloutsv1alpha1.Argument{Name: analysisconfig.ArgTimeoutMeasurements, Value: str(sc.timeoutMeasurements)})
	}
	run, err := analysisutil.NewAnalysisRunFromTemplates([]*rolloutsv1alpha1.AnalysisTemplate{tpl}, nil, args, nil, nil, nil, nil, "", sc.name+"-", w.ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.c.Create(context.Background(), run); err != nil {
		t.Fatalf("create AnalysisRun for %s: %v", sc.name, err)
	}
	return run
}

// verify asks the service directly.
func (w *world) verify(t *testing.T, token, stack, commit, op string) verification.Result {
	t.Helper()
	code, body := w.request(t, token, fmt.Sprintf("/v1/namespaces/%s/stacks/%s/verification?commit=%s&operation=%s", w.ns, stack, commit, op))
	if code != http.StatusOK {
		t.Fatalf("verification of %s: HTTP %d: %s", stack, code, body)
	}
	var r verification.Result
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func (w *world) request(t *testing.T, token, path string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, w.url+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func get(w *world, obj client.Object) error {
	return w.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
}

func waitStack(t *testing.T, w *world, s *pulumiv1.Stack, timeout time.Duration, what string, cond func(*pulumiv1.Stack) bool) {
	t.Helper()
	eventually(t, timeout, s.Name+" "+what, func() (bool, error) {
		if err := get(w, s); err != nil {
			return false, err
		}
		b, _ := json.Marshal(s.Status.Conditions)
		return cond(s), fmt.Errorf("conditions %s", b)
	})
}
