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

	analysisconfig "github.com/stackflow-io/stackflow/analysis/config"
	"github.com/stackflow-io/stackflow/kargo-steps/kargoexpr"
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

// TestKargoVerification: every Stage verifies; its args, evaluated as Kargo
// does (only ctx.project, ctx.stage, the Stage's vars and the Freight), are
// strings; each is declared by the templates it names, which exist
// (Stackflow's ClusterAnalysisTemplates, or the example's AnalysisTemplates
// in the project namespace) and whose args without a default it all gives;
// Argo Rollouts merges the templates and args into a valid AnalysisRun. A
// preview Stack is verified with stackflow-stack-previewed, the others with
// stackflow-stack-applied.
func TestKargoVerification(t *testing.T) {
	cats, err := analysisconfig.ClusterAnalysisTemplates()
	if err != nil {
		t.Fatal(err)
	}
	clusterTemplates := map[string]*rolloutsv1alpha1.ClusterAnalysisTemplate{}
	for _, c := range cats {
		clusterTemplates[c.Name] = c
	}
	templates := exampleAnalysisTemplates(t)
	for _, st := range byKind(kargoObjects(t), "Stage") {
		t.Run(st.name(), func(t *testing.T) {
			vars := varsOf(st.obj, "spec", "vars")
			env := &kargoexpr.Env{Project: kargoProject, Stage: st.name(),
				Commits: []kargoexpr.Commit{{RepoURL: varValue(vars, "repoURL"), ID: freightSHA, Origin: "infra"}}}
			if err := env.EvaluateVars(vars, nil); err != nil {
				t.Fatal(err)
			}
			given := map[string]string{}
			var args []rolloutsv1alpha1.Argument
			for _, a := range list(st.obj, "spec", "verification", "args") {
				v, err := env.Template(str(a, "value"))
				if err != nil {
					t.Fatalf("arg %s: %v", str(a, "name"), err)
				}
				s, ok := v.(string)
				if !ok {
					t.Errorf("arg %s evaluates to %T %v: Kargo's verification args must be strings (use quote())", str(a, "name"), v, v)
				}
				given[str(a, "name")] = s
				args = append(args, rolloutsv1alpha1.Argument{Name: str(a, "name"), Value: ptr.To(s)})
			}
			if want := map[string]string{"namespace": varValue(vars, "stackNamespace"), "stack": varValue(vars, "stackName"), "commit": freightSHA}; !equalMaps(given, want) {
				t.Errorf("verification args %v, want %v", given, want)
			}
			var ats []*rolloutsv1alpha1.AnalysisTemplate
			var cts []*rolloutsv1alpha1.ClusterAnalysisTemplate
			var names []string
			declared := map[string]bool{}
			for _, ref := range list(st.obj, "spec", "verification", "analysisTemplates") {
				name, kind := str(ref, "name"), str(ref, "kind")
				names = append(names, name)
				var spec rolloutsv1alpha1.AnalysisTemplateSpec
				switch kind {
				case "ClusterAnalysisTemplate":
					c, ok := clusterTemplates[name]
					if !ok {
						t.Fatalf("no ClusterAnalysisTemplate %s in analysis/config/templates (%v)", name, keys(clusterTemplates))
					}
					cts, spec = append(cts, c), c.Spec
				case "AnalysisTemplate", "":
					a, ok := templates[name]
					if !ok {
						t.Fatalf("no AnalysisTemplate %s in examples/kargo (%v)", name, keys(templates))
					}
					if a.Namespace != kargoProject {
						t.Errorf("AnalysisTemplate %s is in %q: Kargo looks for it in the project namespace %s", name, a.Namespace, kargoProject)
					}
					ats, spec = append(ats, a), a.Spec
				default:
					t.Fatalf("analysisTemplates kind %q", kind)
				}
				for _, a := range spec.Args {
					declared[a.Name] = true
					if _, ok := given[a.Name]; !ok && a.Value == nil && a.ValueFrom == nil {
						t.Errorf("template %s: arg %s has no default and the Stage does not give it", name, a.Name)
					}
				}
			}
			for name := range given {
				if !declared[name] {
					t.Errorf("arg %s is declared by none of the templates %v", name, names)
				}
			}
			stack := stageStack(t, st)
			want := analysisconfig.AppliedTemplate
			if field(stack.obj, "spec", "preview") == true {
				want = analysisconfig.PreviewedTemplate
			}
			if len(names) == 0 || names[0] != want {
				t.Errorf("analysisTemplates %v: the Stack %s (preview %v) is verified with %s first", names, stack.name(), field(stack.obj, "spec", "preview"), want)
			}
			run, err := analysisutil.NewAnalysisRunFromTemplates(ats, cts, args, nil, nil, nil, nil, "", st.name()+"-", kargoProject)
			if err != nil {
				t.Fatalf("Argo Rollouts cannot make an AnalysisRun of %v: %v", names, err)
			}
			if err := analysisutil.ValidateMetrics(run.Spec.Metrics); err != nil {
				t.Errorf("the AnalysisRun's metrics: %v", err)
			}
		})
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// stageStack is the Stack a Stage promotes (its stackFile in the Kargo
// example's manifests, found by the Stage's stackName var).
func stageStack(t testing.TB, st object) object {
	t.Helper()
	name := varValue(varsOf(st.obj, "spec", "vars"), "stackName")
	for _, o := range byKind(objectsUnder(exampleObjects(t), "kargo/manifests"), "Stack") {
		if o.name() == name {
			return o
		}
	}
	t.Fatalf("%s: no Stack %s in examples/kargo/manifests", st, name)
	return object{}
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
