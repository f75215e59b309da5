package config

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// specs returns every template spec by kind/name.
func specs(t *testing.T) map[string]rolloutsv1alpha1.AnalysisTemplateSpec {
	t.Helper()
	ats, err := AnalysisTemplates()
	if err != nil {
		t.Fatal(err)
	}
	cats, err := ClusterAnalysisTemplates()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]rolloutsv1alpha1.AnalysisTemplateSpec{}
	for _, at := range ats {
		out["AnalysisTemplate/"+at.Name] = at.Spec
	}
	for _, cat := range cats {
		out["ClusterAnalysisTemplate/"+cat.Name] = cat.Spec
	}
	return out
}

func TestTemplatesAreTheFourExpected(t *testing.T) {
	got := specs(t)
	var names []string
	for k := range got {
		names = append(names, k)
	}
	want := []string{
		"AnalysisTemplate/" + AppliedTemplate, "AnalysisTemplate/" + PreviewedTemplate,
		"ClusterAnalysisTemplate/" + AppliedTemplate, "ClusterAnalysisTemplate/" + PreviewedTemplate,
	}
	if len(got) != len(want) {
		t.Fatalf("templates %v, want %v", names, want)
	}
	for _, w := range want {
		if _, ok := got[w]; !ok {
			t.Fatalf("templates %v, want %v", names, want)
		}
	}
	// The two kinds carry the same spec, name by name.
	for _, name := range []string{AppliedTemplate, PreviewedTemplate} {
		if !reflect.DeepEqual(got["AnalysisTemplate/"+name], got["ClusterAnalysisTemplate/"+name]) {
			t.Errorf("%s: the AnalysisTemplate and the ClusterAnalysisTemplate differ", name)
		}
	}
	ats, _ := AnalysisTemplates()
	for _, at := range ats {
		if at.Namespace != "" {
			t.Errorf("AnalysisTemplate %s has namespace %q; it is applied into the caller's namespace", at.Name, at.Namespace)
		}
	}
}

func operationOf(name string) string {
	if name == PreviewedTemplate {
		return "preview"
	}
	return "up"
}

func TestTemplateArgs(t *testing.T) {
	for key, spec := range specs(t) {
		args := map[string]rolloutsv1alpha1.Argument{}
		var order []string
		for _, a := range spec.Args {
			args[a.Name] = a
			order = append(order, a.Name)
		}
		want := []string{ArgNamespace, ArgStack, ArgCommit, ArgToken, ArgServer, ArgTimeoutMeasurements}
		if !reflect.DeepEqual(order, want) {
			t.Errorf("%s: args %v, want %v", key, order, want)
		}
		for _, required := range []string{ArgNamespace, ArgStack, ArgCommit} {
			if a := args[required]; a.Value != nil || a.ValueFrom != nil {
				t.Errorf("%s: arg %s has a default; the caller must give it", key, required)
			}
		}
		tok := args[ArgToken]
		if tok.Value != nil || tok.ValueFrom == nil || tok.ValueFrom.SecretKeyRef == nil ||
			tok.ValueFrom.SecretKeyRef.Name != TokenSecret || tok.ValueFrom.SecretKeyRef.Key != TokenSecretKey {
			t.Errorf("%s: token arg %+v, want valueFrom.secretKeyRef %s/%s and no value", key, tok, TokenSecret, TokenSecretKey)
		}
		if s := args[ArgServer]; s.Value == nil || *s.Value != DefaultServer {
			t.Errorf("%s: server default %v, want %s", key, s.Value, DefaultServer)
		}
		if s := args[ArgTimeoutMeasurements]; s.Value == nil || *s.Value != "180" {
			t.Errorf("%s: timeoutMeasurements default %v, want 180", key, s.Value)
		}
	}
}

// resolve resolves the metrics' args the way Argo Rollouts does
// (utils/analysis.ResolveMetricArgs: {{args.NAME}} replaced in the metric's
// JSON), with the template's defaults merged with the given values and
// Secret references replaced with "the-token". A plain replacement is
// enough: none of the values here need JSON quoting. (The build-tagged
// rollouts_utils_test.go uses Rollouts' own functions.)
func resolve(t *testing.T, spec rolloutsv1alpha1.AnalysisTemplateSpec, values map[string]string) []rolloutsv1alpha1.Metric {
	t.Helper()
	args := map[string]string{}
	for _, a := range spec.Args {
		switch {
		case a.ValueFrom != nil && a.ValueFrom.SecretKeyRef != nil:
			args[a.Name] = "the-token"
		case a.Value != nil:
			args[a.Name] = *a.Value
		}
	}
	for k, v := range values {
		args[k] = v
	}
	var out []rolloutsv1alpha1.Metric
	for _, m := range spec.Metrics {
		raw, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		s := string(raw)
		for k, v := range args {
			s = strings.ReplaceAll(s, "{{args."+k+"}}", v)
		}
		if strings.Contains(s, "{{") {
			t.Fatalf("unresolved argument in %s", s)
		}
		var r rolloutsv1alpha1.Metric
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

var callerArgs = map[string]string{ArgNamespace: "stacks", ArgStack: "app", ArgCommit: "0123abcd"}

func with(base map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func metricByName(t *testing.T, metrics []rolloutsv1alpha1.Metric, name string) rolloutsv1alpha1.Metric {
	t.Helper()
	for _, m := range metrics {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("no metric %s", name)
	return rolloutsv1alpha1.Metric{}
}

func intOf(t *testing.T, v *intstr.IntOrString, what string) int {
	t.Helper()
	if v == nil {
		t.Fatalf("%s unset", what)
	}
	if v.Type != intstr.Int {
		t.Fatalf("%s is %q, want an integer", what, v.String())
	}
	return v.IntValue()
}

// TestMetricLimits asserts the limits the run's outcome depends on (see the
// comment at the top of templates/analysistemplates.yaml).
func TestMetricLimits(t *testing.T) {
	for key, spec := range specs(t) {
		if len(spec.Metrics) != 2 {
			t.Fatalf("%s: %d metrics, want verified and deadline", key, len(spec.Metrics))
		}
		name := strings.TrimPrefix(strings.TrimPrefix(key, "Cluster"), "AnalysisTemplate/")
		metrics := resolve(t, spec, callerArgs)
		v := metricByName(t, metrics, VerifiedMetric)
		d := metricByName(t, metrics, DeadlineMetric)
		for _, m := range []rolloutsv1alpha1.Metric{v, d} {
			iv, err := m.Interval.Duration()
			if err != nil || iv != Interval {
				t.Errorf("%s/%s: interval %q, want %v", key, m.Name, m.Interval, Interval)
			}
			// A run must not end before Kargo has recorded it (see the
			// templates' comment): both metrics wait InitialDelay, and no
			// longer.
			if d, err := m.InitialDelay.Duration(); err != nil || d != InitialDelay {
				t.Errorf("%s/%s: initialDelay %q, want %v", key, m.Name, m.InitialDelay, InitialDelay)
			}
			if got := intOf(t, m.ConsecutiveSuccessLimit, m.Name+".consecutiveSuccessLimit"); got != 1 {
				t.Errorf("%s/%s: consecutiveSuccessLimit %d, want 1 (succeed on the first Succeeded)", key, m.Name, got)
			}
			if got := intOf(t, m.ConsecutiveErrorLimit, m.Name+".consecutiveErrorLimit"); got != 30 {
				t.Errorf("%s/%s: consecutiveErrorLimit %d, want 30", key, m.Name, got)
			}
			if m.SuccessCondition != `result.phase == "Succeeded"` {
				t.Errorf("%s/%s: successCondition %q", key, m.Name, m.SuccessCondition)
			}
			w := m.Provider.Web
			if w == nil {
				t.Fatalf("%s/%s: not a web metric", key, m.Name)
			}
			if w.URL != DefaultServer+"/v1/namespaces/stacks/stacks/app/verification?commit=0123abcd&operation="+operationOf(name) {
				t.Errorf("%s/%s: url %s", key, m.Name, w.URL)
			}
			if w.Method != "" && w.Method != rolloutsv1alpha1.WebMetricMethodGet {
				t.Errorf("%s/%s: method %s", key, m.Name, w.Method)
			}
			if len(w.Headers) != 1 || w.Headers[0].Key != "Authorization" || w.Headers[0].Value != "Bearer the-token" {
				t.Errorf("%s/%s: headers %+v", key, m.Name, w.Headers)
			}
			if w.JSONPath != "{$}" || w.TimeoutSeconds != 10 {
				t.Errorf("%s/%s: jsonPath %q timeoutSeconds %d", key, m.Name, w.JSONPath, w.TimeoutSeconds)
			}
		}
		// verified: Failed fails it at once; Pending/Running are inconclusive
		// and tolerated until the deadline; finite for Rollouts.
		if v.FailureCondition != `result.phase == "Failed"` {
			t.Errorf("%s/verified: failureCondition %q", key, v.FailureCondition)
		}
		if got := intOf(t, v.FailureLimit, "verified.failureLimit"); got != 0 {
			t.Errorf("%s/verified: failureLimit %d, want 0", key, got)
		}
		vCount := intOf(t, v.Count, "verified.count")
		vInconclusive := intOf(t, v.InconclusiveLimit, "verified.inconclusiveLimit")
		// deadline: only a successCondition; failures ignored (-1) but counted.
		if d.FailureCondition != "" || d.InconclusiveLimit != nil {
			t.Errorf("%s/deadline: failureCondition %q inconclusiveLimit %v: every non-success must be a (counted, ignored) failure", key, d.FailureCondition, d.InconclusiveLimit)
		}
		if got := intOf(t, d.FailureLimit, "deadline.failureLimit"); got != -1 {
			t.Errorf("%s/deadline: failureLimit %d, want -1 (count reached then ends Failed, not Inconclusive)", key, got)
		}
		// The unresolved count is the arg; resolved, the default.
		if raw := metricByName(t, spec.Metrics, DeadlineMetric).Count; raw == nil || raw.String() != "{{args.timeoutMeasurements}}" {
			t.Errorf("%s/deadline: count %v, want {{args.timeoutMeasurements}}", key, raw)
		}
		dCount := d.Count.IntValue()
		if dCount != DefaultTimeoutMeasurements || time.Duration(dCount)*Interval != 30*time.Minute || DefaultTimeout != 30*time.Minute {
			t.Errorf("%s/deadline: count %d × %v, want 30 minutes", key, dCount, Interval)
		}
		// The deadline must end the run long before verified's own limits.
		if vInconclusive <= dCount*2 || vCount < vInconclusive {
			t.Errorf("%s/verified: count %d inconclusiveLimit %d, want inconclusiveLimit well above the deadline (%d) and count >= inconclusiveLimit", key, vCount, vInconclusive, dCount)
		}
	}
}

// TestMetricsAreFinite: a Rollout refuses a template (in a canary step or a
// blue-green pre/post-promotion analysis) whose metric runs indefinitely,
// i.e. whose EffectiveCount, with the args at their defaults (a caller's
// required args at a placeholder), is nil
// (pkg/apis/rollouts/validation.ValidateAnalysisTemplateWithType).
func TestMetricsAreFinite(t *testing.T) {
	placeholders := with(callerArgs, ArgNamespace, "dummy-value", ArgStack, "dummy-value", ArgCommit, "dummy-value")
	for key, spec := range specs(t) {
		for _, m := range resolve(t, spec, placeholders) {
			if m.EffectiveCount() == nil {
				t.Errorf("%s/%s runs indefinitely: a Rollout would refuse the template", key, m.Name)
			}
		}
	}
}
