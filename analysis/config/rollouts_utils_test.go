// These tests call Argo Rollouts' own argument resolution, metric validation
// and web provider on the shipped templates.
package config

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/argoproj/argo-rollouts/metricproviders/webmetric"
	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	analysisutil "github.com/argoproj/argo-rollouts/utils/analysis"
	log "github.com/sirupsen/logrus"
	"k8s.io/utils/ptr"
)

// TestMetricsPassRolloutsValidation runs Argo Rollouts' ValidateMetrics on
// the metrics as the AnalysisRun controller validates them (args resolved,
// Secrets replaced by a placeholder), with the default timeout and others,
// and on the unresolved template (the templated count reads as 0 there,
// which validation accepts).
func TestMetricsPassRolloutsValidation(t *testing.T) {
	for key, spec := range specs(t) {
		if err := analysisutil.ValidateMetrics(spec.Metrics); err != nil {
			t.Errorf("%s unresolved: %v", key, err)
		}
		for _, values := range []map[string]string{callerArgs, with(callerArgs, ArgTimeoutMeasurements, "3"), with(callerArgs, ArgTimeoutMeasurements, "8640")} {
			if err := analysisutil.ValidateMetrics(resolveWithRollouts(t, spec, values)); err != nil {
				t.Errorf("%s with %v: %v", key, values, err)
			}
		}
	}
}

// TestResolveMatchesRollouts checks templates_test.go's resolve against
// Rollouts' own.
func TestResolveMatchesRollouts(t *testing.T) {
	for key, spec := range specs(t) {
		if got, want := resolve(t, spec, callerArgs), resolveWithRollouts(t, spec, callerArgs); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: resolve\n  %+v\nRollouts\n  %+v", key, got, want)
		}
	}
}

// resolveWithRollouts resolves the metrics' args as the AnalysisRun controller does
// before validating them (analysis.getResolvedMetricsWithoutSecrets): the
// template's defaults merged with the given values, Secret references
// replaced with a placeholder.
func resolveWithRollouts(t *testing.T, spec rolloutsv1alpha1.AnalysisTemplateSpec, values map[string]string) []rolloutsv1alpha1.Metric {
	t.Helper()
	var incoming []rolloutsv1alpha1.Argument
	for k, v := range values {
		incoming = append(incoming, rolloutsv1alpha1.Argument{Name: k, Value: ptr.To(v)})
	}
	args, err := analysisutil.MergeArgs(incoming, spec.DeepCopy().Args)
	if err != nil {
		t.Fatal(err)
	}
	for i := range args {
		if args[i].ValueFrom != nil && args[i].ValueFrom.SecretKeyRef != nil {
			args[i].ValueFrom = nil
			args[i].Value = ptr.To("the-token")
		}
	}
	var out []rolloutsv1alpha1.Metric
	for _, m := range spec.Metrics {
		r, err := analysisutil.ResolveMetricArgs(m, args)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, *r)
	}
	return out
}

// verificationServer answers every request with the next phase of its
// script (repeating the last), recording the requests.
type verificationServer struct {
	*httptest.Server
	mu       sync.Mutex
	phases   []string
	requests []*http.Request
}

func newVerificationServer(t *testing.T, phases ...string) *verificationServer {
	s := &verificationServer{phases: phases}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r)
		phase := s.phases[0]
		if len(s.phases) > 1 {
			s.phases = s.phases[1:]
		}
		s.mu.Unlock()
		switch phase {
		case "401":
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		case "html":
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<html>not the service</html>"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"phase": phase, "reason": "Test", "message": "m", "stack": map[string]string{"namespace": "stacks", "name": "app"}})
	}))
	t.Cleanup(s.Close)
	return s
}

// measure takes one measurement of a metric with Rollouts' web provider.
func measure(t *testing.T, m rolloutsv1alpha1.Metric) rolloutsv1alpha1.Measurement {
	t.Helper()
	client, err := webmetric.NewWebMetricHttpClient(m)
	if err != nil {
		t.Fatal(err)
	}
	parser, err := webmetric.NewWebMetricJsonParser(m)
	if err != nil {
		t.Fatal(err)
	}
	p := webmetric.NewWebMetricProvider(*log.NewEntry(log.StandardLogger()), client, parser)
	return p.Run(&rolloutsv1alpha1.AnalysisRun{}, m)
}

// TestMeasurementPhases runs each metric's measurement with Argo Rollouts'
// own web provider against a server answering each verification phase.
func TestMeasurementPhases(t *testing.T) {
	want := map[string]map[string]rolloutsv1alpha1.AnalysisPhase{
		VerifiedMetric: {
			"Pending": rolloutsv1alpha1.AnalysisPhaseInconclusive, "Running": rolloutsv1alpha1.AnalysisPhaseInconclusive,
			"Succeeded": rolloutsv1alpha1.AnalysisPhaseSuccessful, "Failed": rolloutsv1alpha1.AnalysisPhaseFailed,
			"401": rolloutsv1alpha1.AnalysisPhaseError,
			// Not the service's answer, yet Successful: Rollouts takes a
			// non-JSON 2xx body as a success. server must be right.
			"html": rolloutsv1alpha1.AnalysisPhaseSuccessful,
		},
		DeadlineMetric: {
			"Pending": rolloutsv1alpha1.AnalysisPhaseFailed, "Running": rolloutsv1alpha1.AnalysisPhaseFailed,
			"Succeeded": rolloutsv1alpha1.AnalysisPhaseSuccessful, "Failed": rolloutsv1alpha1.AnalysisPhaseFailed,
			"401": rolloutsv1alpha1.AnalysisPhaseError, "html": rolloutsv1alpha1.AnalysisPhaseSuccessful,
		},
	}
	for key, spec := range specs(t) {
		name := strings.TrimPrefix(strings.TrimPrefix(key, "Cluster"), "AnalysisTemplate/")
		for metricName, byPhase := range want {
			for phase, wantPhase := range byPhase {
				srv := newVerificationServer(t, phase)
				m := metricByName(t, resolveWithRollouts(t, spec, with(callerArgs, ArgServer, srv.URL)), metricName)
				got := measure(t, m)
				if got.Phase != wantPhase {
					t.Errorf("%s/%s on %s: measurement %s (%s), want %s", key, metricName, phase, got.Phase, got.Message, wantPhase)
				}
				r := srv.requests[0]
				if r.Method != http.MethodGet || r.URL.Path != "/v1/namespaces/stacks/stacks/app/verification" ||
					r.URL.Query().Get("commit") != "0123abcd" || r.URL.Query().Get("operation") != operationOf(name) ||
					r.Header.Get("Authorization") != "Bearer the-token" {
					t.Errorf("%s/%s: request %s %s Authorization=%q", key, metricName, r.Method, r.URL, r.Header.Get("Authorization"))
				}
			}
		}
	}
}
