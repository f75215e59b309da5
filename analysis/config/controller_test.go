package config

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// startRolloutsController runs the real Argo Rollouts v1.10.1 controller
// (analysis controller only) against the test control plane, logging to a
// file printed when the test fails.
func startRolloutsController(t *testing.T) {
	t.Helper()
	bin := filepath.Join(rolloutsDir, "rollouts-controller")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s missing: build it with `make substrate` (hack/substrate.sh rollouts): %v", bin, err)
	}
	user, err := env.AddUser(envtest.User{Name: "argo-rollouts", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "rollouts-controller.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin,
		"--kubeconfig="+kc,
		"--controllers=analysis",
		"--leader-elect=false",
		"--metricsPort="+strconv.Itoa(freePort(t)),
		"--healthzPort="+strconv.Itoa(freePort(t)),
		"--loglevel=info",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		_ = logFile.Close()
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			if len(data) > 20000 {
				data = data[len(data)-20000:]
			}
			t.Logf("rollouts-controller log (tail):\n%s", data)
		}
	})
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// scenario is what the fake verification service answers for one Stack:
// `before` (a phase, or an HTTP status code such as "503") until `change`
// after the first request for the Stack (so between the first two
// measurement rounds however late the controller starts), then `after`;
// `before` for ever when change is 0.
type scenario struct {
	before, after string
	change        time.Duration
	until         time.Time // set by the first request
}

type request struct {
	at        time.Time
	stack     string
	operation string
	commit    string
	auth      string
}

// fakeService answers the verification route like stackflow-analysis, from
// the scenarios, and records the requests.
type fakeService struct {
	*httptest.Server
	mu        sync.Mutex
	scenarios map[string]*scenario
	requests  []request
}

var verificationPath = regexp.MustCompile(`^/v1/namespaces/([^/]+)/stacks/([^/]+)/verification$`)

func newFakeService(t *testing.T) *fakeService {
	f := &fakeService{scenarios: map[string]*scenario{}}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := verificationPath.FindStringSubmatch(r.URL.Path)
		if m == nil {
			http.NotFound(w, r)
			return
		}
		now := time.Now()
		f.mu.Lock()
		f.requests = append(f.requests, request{at: now, stack: m[2], operation: r.URL.Query().Get("operation"),
			commit: r.URL.Query().Get("commit"), auth: r.Header.Get("Authorization")})
		sc := f.scenarios[m[2]]
		f.mu.Unlock()
		if sc == nil {
			http.Error(w, "no scenario", http.StatusInternalServerError)
			return
		}
		f.mu.Lock()
		if sc.until.IsZero() && sc.change > 0 {
			sc.until = now.Add(sc.change)
		}
		answer := sc.before
		if sc.change > 0 && !now.Before(sc.until) {
			answer = sc.after
		}
		f.mu.Unlock()
		if code, err := strconv.Atoi(answer); err == nil {
			http.Error(w, `{"error":"unavailable"}`, code)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"phase":%q,"reason":"Test","message":"scripted","operation":%q,"stack":{"namespace":%q,"name":%q}}`,
			answer, r.URL.Query().Get("operation"), m[1], m[2])
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeService) set(stack string, sc *scenario) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scenarios[stack] = sc
}

func (f *fakeService) until(sc *scenario) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sc.until
}

func (f *fakeService) requestsFor(stack string) []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []request
	for _, r := range f.requests {
		if r.stack == stack {
			out = append(out, r)
		}
	}
	return out
}

// newRun builds the AnalysisRun a caller (Kargo, a Rollout) creates from a
// template: its metrics, and its args with the given values merged in (as
// Argo Rollouts' MergeArgs does).
func newRun(ns, name string, spec rolloutsv1alpha1.AnalysisTemplateSpec, values map[string]string) *rolloutsv1alpha1.AnalysisRun {
	spec = *spec.DeepCopy()
	for i, a := range spec.Args {
		if v, ok := values[a.Name]; ok {
			spec.Args[i].Value = ptr.To(v)
		}
	}
	return &rolloutsv1alpha1.AnalysisRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       rolloutsv1alpha1.AnalysisRunSpec{Metrics: spec.Metrics, Args: spec.Args},
	}
}

func waitCompleted(t *testing.T, run *rolloutsv1alpha1.AnalysisRun, timeout time.Duration) *rolloutsv1alpha1.AnalysisRun {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cur := &rolloutsv1alpha1.AnalysisRun{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(run), cur); err != nil {
			t.Fatal(err)
		}
		if cur.Status.Phase.Completed() {
			return cur
		}
		if time.Now().After(deadline) {
			t.Fatalf("AnalysisRun %s still %q after %v: %+v", run.Name, cur.Status.Phase, timeout, cur.Status.MetricResults)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func metricResult(t *testing.T, run *rolloutsv1alpha1.AnalysisRun, name string) rolloutsv1alpha1.MetricResult {
	t.Helper()
	for _, r := range run.Status.MetricResults {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("run %s has no result for metric %s: %+v", run.Name, name, run.Status.MetricResults)
	return rolloutsv1alpha1.MetricResult{}
}

// TestTemplatesUnderTheRolloutsController runs AnalysisRuns built from the
// templates (as stored by the API server) under the real Argo Rollouts
// controller, against a fake verification service, and checks the promises
// of the templates: Successful within one interval of the phase becoming
// Succeeded, Failed within one interval of it becoming Failed, errors of a
// restart tolerated, and Failed (not Inconclusive) when the deadline passes.
func TestTemplatesUnderTheRolloutsController(t *testing.T) {
	startRolloutsController(t)
	ctx := context.Background()
	svc := newFakeService(t)

	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "controller-test-"}}
	if err := k8s.Create(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	// The token the templates read by default (the fake service takes any;
	// TestKargoProjectTokenUnderTheRolloutsController fills it as the
	// kargo-project CronJob does, for the real service).
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: TokenSecret, Namespace: ns},
		Data:       map[string][]byte{TokenSecretKey: []byte("test-token")},
	}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	// Store the templates and read them back, so the runs are built from
	// what the API server keeps (count as a string included).
	ats, err := AnalysisTemplates()
	if err != nil {
		t.Fatal(err)
	}
	cats, err := ClusterAnalysisTemplates()
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]rolloutsv1alpha1.AnalysisTemplateSpec{}
	for _, at := range ats {
		at.Namespace = ns
		if err := k8s.Create(ctx, at); err != nil {
			t.Fatal(err)
		}
		got := &rolloutsv1alpha1.AnalysisTemplate{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(at), got); err != nil {
			t.Fatal(err)
		}
		stored["AnalysisTemplate/"+at.Name] = got.Spec
	}
	for _, cat := range cats {
		if err := k8s.Create(ctx, cat); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		got := &rolloutsv1alpha1.ClusterAnalysisTemplate{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(cat), got); err != nil {
			t.Fatal(err)
		}
		stored["ClusterAnalysisTemplate/"+cat.Name] = got.Spec
	}

	// The phase changes this long after the first request: after the
	// second measurement round (10 s later), before the third.
	const change = 15 * time.Second
	// Slack for the controller's reconcile and completedAt's second precision.
	const slack = 3 * time.Second

	cases := []struct {
		name, template, operation string
		before, after             string
		forever                   bool
		timeoutMeasurements       string
		wantPhase                 rolloutsv1alpha1.AnalysisPhase
		wantVerified, wantDead    rolloutsv1alpha1.AnalysisPhase
	}{
		{name: "succeeds", template: "AnalysisTemplate/" + AppliedTemplate, operation: "up", before: "Pending", after: "Succeeded",
			wantPhase: rolloutsv1alpha1.AnalysisPhaseSuccessful, wantVerified: rolloutsv1alpha1.AnalysisPhaseSuccessful, wantDead: rolloutsv1alpha1.AnalysisPhaseSuccessful},
		{name: "running-then-succeeds", template: "ClusterAnalysisTemplate/" + PreviewedTemplate, operation: "preview", before: "Running", after: "Succeeded",
			wantPhase: rolloutsv1alpha1.AnalysisPhaseSuccessful, wantVerified: rolloutsv1alpha1.AnalysisPhaseSuccessful, wantDead: rolloutsv1alpha1.AnalysisPhaseSuccessful},
		{name: "fails", template: "ClusterAnalysisTemplate/" + AppliedTemplate, operation: "up", before: "Pending", after: "Failed",
			wantPhase: rolloutsv1alpha1.AnalysisPhaseFailed, wantVerified: rolloutsv1alpha1.AnalysisPhaseFailed, wantDead: rolloutsv1alpha1.AnalysisPhaseSuccessful},
		{name: "service-restarting", template: "AnalysisTemplate/" + AppliedTemplate, operation: "up", before: "503", after: "Succeeded",
			wantPhase: rolloutsv1alpha1.AnalysisPhaseSuccessful, wantVerified: rolloutsv1alpha1.AnalysisPhaseSuccessful, wantDead: rolloutsv1alpha1.AnalysisPhaseSuccessful},
		{name: "times-out", template: "AnalysisTemplate/" + PreviewedTemplate, operation: "preview", before: "Pending", forever: true, timeoutMeasurements: "3",
			wantPhase: rolloutsv1alpha1.AnalysisPhaseFailed, wantVerified: rolloutsv1alpha1.AnalysisPhaseSuccessful, wantDead: rolloutsv1alpha1.AnalysisPhaseFailed},
	}
	// Start every run at once (they take about 20 s each), then check them
	// one by one.
	runs := make([]*rolloutsv1alpha1.AnalysisRun, len(cases))
	scenarios := make([]*scenario, len(cases))
	for i, tc := range cases {
		stack := "stack-" + tc.name
		values := map[string]string{ArgNamespace: "stacks", ArgStack: stack, ArgCommit: "0123abcd", ArgServer: svc.URL}
		if tc.timeoutMeasurements != "" {
			values[ArgTimeoutMeasurements] = tc.timeoutMeasurements
		}
		sc := &scenario{before: tc.before, after: tc.after, change: change}
		if tc.forever {
			sc.change = 0
		}
		svc.set(stack, sc)
		run := newRun(ns, tc.name, stored[tc.template], values)
		if err := k8s.Create(ctx, run, &client.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
			t.Fatal(err)
		}
		runs[i], scenarios[i] = run, sc
	}
	for i, tc := range cases {
		run, sc, stack := runs[i], scenarios[i], "stack-"+tc.name
		t.Run(tc.name, func(t *testing.T) {
			done := waitCompleted(t, run, 2*time.Minute)
			if done.Status.Phase != tc.wantPhase {
				t.Errorf("run %s: %s (%s), want %s", tc.name, done.Status.Phase, done.Status.Message, tc.wantPhase)
			}
			if got := metricResult(t, done, VerifiedMetric).Phase; got != tc.wantVerified {
				t.Errorf("metric verified: %s, want %s", got, tc.wantVerified)
			}
			if got := metricResult(t, done, DeadlineMetric).Phase; got != tc.wantDead {
				t.Errorf("metric deadline: %s, want %s", got, tc.wantDead)
			}
			if done.Status.CompletedAt == nil || done.Status.StartedAt == nil {
				t.Fatalf("run %s: startedAt %v completedAt %v", tc.name, done.Status.StartedAt, done.Status.CompletedAt)
			}
			completed := done.Status.CompletedAt.Time
			if tc.forever {
				// timeoutMeasurements rounds, 10 s apart: failed after
				// (timeoutMeasurements-1) intervals.
				n, _ := strconv.Atoi(tc.timeoutMeasurements)
				took := completed.Sub(done.Status.StartedAt.Time)
				if took < time.Duration(n-1)*Interval-slack || took > time.Duration(n)*Interval+slack {
					t.Errorf("timed out after %v, want about %v", took, time.Duration(n-1)*Interval)
				}
				if r := metricResult(t, done, DeadlineMetric); r.Count != int32(n) {
					t.Errorf("deadline counted %d measurements, want %d", r.Count, n)
				}
			} else if late := completed.Sub(svc.until(sc)); late > Interval+slack {
				t.Errorf("run completed %v after the phase became %s, want within one interval (%v)", late, tc.after, Interval)
			}
			if tc.before == "503" {
				if r := metricResult(t, done, VerifiedMetric); r.Error == 0 {
					t.Errorf("no measurement errors recorded while the service answered 503: %+v", r)
				}
			}
			reqs := svc.requestsFor(stack)
			if len(reqs) < 2 {
				t.Fatalf("%d requests", len(reqs))
			}
			for _, r := range reqs {
				if r.operation != tc.operation || r.commit != "0123abcd" || r.auth != "Bearer test-token" {
					t.Errorf("request operation=%q commit=%q Authorization=%q, want %s, 0123abcd, the Secret's token", r.operation, r.commit, r.auth, tc.operation)
					break
				}
			}
			var b bytes.Buffer
			for _, r := range done.Status.MetricResults {
				fmt.Fprintf(&b, " %s=%s(count %d, ok %d, failed %d, inconclusive %d, error %d)", r.Name, r.Phase, r.Count, r.Successful, r.Failed, r.Inconclusive, r.Error)
			}
			t.Logf("%s: %s after %v;%s", tc.name, done.Status.Phase, completed.Sub(done.Status.StartedAt.Time).Round(time.Second), b.String())
		})
	}
}
