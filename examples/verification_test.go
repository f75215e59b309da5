package examples

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/argoproj/argo-rollouts/metricproviders/webmetric"
	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	analysisutil "github.com/argoproj/argo-rollouts/utils/analysis"
	log "github.com/sirupsen/logrus"
	"k8s.io/utils/ptr"
)

// exampleAnalysisTemplates are the AnalysisTemplates the Kargo example
// ships, decoded strictly as Argo Rollouts' type.
func exampleAnalysisTemplates(t testing.TB) map[string]*rolloutsv1alpha1.AnalysisTemplate {
	t.Helper()
	out := map[string]*rolloutsv1alpha1.AnalysisTemplate{}
	for _, o := range byKind(kargoObjects(t), "AnalysisTemplate") {
		var at rolloutsv1alpha1.AnalysisTemplate
		dec := json.NewDecoder(strings.NewReader(string(mustJSON(t, o.obj))))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&at); err != nil {
			t.Fatalf("%s: not an Argo Rollouts AnalysisTemplate: %v", o, err)
		}
		out[at.Name] = &at
	}
	return out
}

// TestDeletesNothingTemplate measures the example's
// stackflow-preview-deletes-nothing metric with Argo Rollouts' own web
// provider and condition evaluation, against answers of stackflow-analysis.
func TestDeletesNothingTemplate(t *testing.T) {
	at := exampleAnalysisTemplates(t)["stackflow-preview-deletes-nothing"]
	if at == nil {
		t.Fatal("no AnalysisTemplate stackflow-preview-deletes-nothing")
	}
	changes := func(del, repl int) map[string]any {
		return map[string]any{"name": "web-preview-4", "type": "preview", "state": "succeeded",
			"changes": map[string]any{"create": 1, "update": 2, "delete": del, "replace": repl, "same": 5}}
	}
	for _, tt := range []struct {
		name string
		body map[string]any
		want rolloutsv1alpha1.AnalysisPhase
	}{
		{"preview deletes nothing", map[string]any{"phase": "Succeeded", "update": changes(0, 0)}, rolloutsv1alpha1.AnalysisPhaseSuccessful},
		{"preview deletes a resource", map[string]any{"phase": "Succeeded", "update": changes(1, 0)}, rolloutsv1alpha1.AnalysisPhaseFailed},
		{"preview replaces a resource", map[string]any{"phase": "Succeeded", "update": changes(0, 1)}, rolloutsv1alpha1.AnalysisPhaseFailed},
		{"preview failed", map[string]any{"phase": "Failed", "reason": "StackStalled"}, rolloutsv1alpha1.AnalysisPhaseFailed},
		{"preview running", map[string]any{"phase": "Running", "update": map[string]any{"name": "web-preview-4", "state": "running"}}, rolloutsv1alpha1.AnalysisPhaseInconclusive},
		{"not yet", map[string]any{"phase": "Pending", "reason": "CommitNotTargeted"}, rolloutsv1alpha1.AnalysisPhaseInconclusive},
		{"change counts gone with the Update", map[string]any{"phase": "Succeeded", "update": map[string]any{"name": "web-preview-4", "state": "succeeded"}}, rolloutsv1alpha1.AnalysisPhaseInconclusive},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got *http.Request
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = r
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(tt.body)
			}))
			defer srv.Close()
			incoming := []rolloutsv1alpha1.Argument{
				{Name: "namespace", Value: ptr.To("kargo-demo-stacks")}, {Name: "stack", Value: ptr.To("web-preview")},
				{Name: "commit", Value: ptr.To(freightSHA)}, {Name: "server", Value: ptr.To(srv.URL)},
			}
			args, err := analysisutil.MergeArgs(incoming, at.Spec.DeepCopy().Args)
			if err != nil {
				t.Fatal(err)
			}
			for i := range args {
				if args[i].ValueFrom != nil {
					args[i].ValueFrom, args[i].Value = nil, ptr.To("the-token")
				}
			}
			if len(at.Spec.Metrics) != 1 {
				t.Fatalf("%d metrics", len(at.Spec.Metrics))
			}
			m, err := analysisutil.ResolveMetricArgs(at.Spec.Metrics[0], args)
			if err != nil {
				t.Fatal(err)
			}
			client, err := webmetric.NewWebMetricHttpClient(*m)
			if err != nil {
				t.Fatal(err)
			}
			parser, err := webmetric.NewWebMetricJsonParser(*m)
			if err != nil {
				t.Fatal(err)
			}
			meas := webmetric.NewWebMetricProvider(*log.NewEntry(log.StandardLogger()), client, parser).Run(&rolloutsv1alpha1.AnalysisRun{}, *m)
			if meas.Phase != tt.want {
				t.Errorf("measurement %s (%s), want %s", meas.Phase, meas.Message, tt.want)
			}
			if got == nil || got.URL.Path != "/v1/namespaces/kargo-demo-stacks/stacks/web-preview/verification" ||
				got.URL.Query().Get("operation") != "preview" || got.URL.Query().Get("commit") != freightSHA || got.Header.Get("Authorization") != "Bearer the-token" {
				t.Errorf("request %v", got)
			}
		})
	}
}
