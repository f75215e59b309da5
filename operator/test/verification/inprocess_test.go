package verification

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/metricproviders/webmetric"
	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	analysisutil "github.com/argoproj/argo-rollouts/utils/analysis"
	log "github.com/sirupsen/logrus"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	analysisconfig "github.com/stackflow-io/stackflow/analysis/config"
	"github.com/stackflow-io/stackflow/analysis/pulumicloud/cloudtest"
	"github.com/stackflow-io/stackflow/analysis/verification"
)

// metricsInProcess runs each template's metrics with Argo Rollouts' own web
// provider and condition evaluation against the live service, for a Stack in
// every phase, and checks each measurement's phase.
func (w *world) metricsInProcess(t *testing.T, templates []*rolloutsv1alpha1.AnalysisTemplate, scenarios []*scenario, sha, other string) {
	for _, tt := range []struct {
		name, template, stack, commit, phase string
		want                                 metricWant
	}{
		{"Succeeded", analysisconfig.AppliedTemplate, "applied", sha, "Succeeded", succeeded},
		{"Succeeded preview", analysisconfig.PreviewedTemplate, "previewed", sha, "Succeeded", succeeded},
		{"Failed (stalled)", analysisconfig.AppliedTemplate, "stalled", sha, "Failed", failed},
		{"Failed (up of a preview stack)", analysisconfig.AppliedTemplate, "previewed", sha, "Failed", failed},
		{"Pending (another commit)", analysisconfig.AppliedTemplate, "never", other, "Pending", waiting},
		{"Pending (no such stack)", analysisconfig.PreviewedTemplate, "missing", sha, "Pending", waiting},
	} {
		t.Run(tt.name, func(t *testing.T) { w.checkMetrics(t, templates, tt.template, tt.stack, tt.commit, tt.phase, tt.want) })
	}
}

// metricWant is the measurement phase each metric of a template must give.
type metricWant struct {
	verified, deadline rolloutsv1alpha1.AnalysisPhase
}

var (
	succeeded = metricWant{rolloutsv1alpha1.AnalysisPhaseSuccessful, rolloutsv1alpha1.AnalysisPhaseSuccessful}
	failed    = metricWant{rolloutsv1alpha1.AnalysisPhaseFailed, rolloutsv1alpha1.AnalysisPhaseFailed}
	// waiting: Pending or Running keep the verdict open; only the deadline
	// counts it.
	waiting = metricWant{rolloutsv1alpha1.AnalysisPhaseInconclusive, rolloutsv1alpha1.AnalysisPhaseFailed}
)

// checkMetrics checks the service answers phase for the Stack and commit,
// then measures each metric of the template once, in process.
func (w *world) checkMetrics(t *testing.T, templates []*rolloutsv1alpha1.AnalysisTemplate, template, stack, commit, phase string, want metricWant) {
	t.Helper()
	if got := w.verify(t, w.token, stack, commit, opOf(template)); string(got.Phase) != phase {
		t.Fatalf("the service says %s (%s), the case needs %s", got.Phase, got.Message, phase)
	}
	for _, m := range templateMetrics(t, templates, template, w, stack, commit) {
		client, err := webmetric.NewWebMetricHttpClient(m)
		if err != nil {
			t.Fatal(err)
		}
		parser, err := webmetric.NewWebMetricJsonParser(m)
		if err != nil {
			t.Fatal(err)
		}
		p := webmetric.NewWebMetricProvider(*log.WithField("metric", m.Name), client, parser)
		meas := p.Run(&rolloutsv1alpha1.AnalysisRun{}, m)
		wantPhase := want.verified
		if m.Name == analysisconfig.DeadlineMetric {
			wantPhase = want.deadline
		}
		if meas.Phase != wantPhase {
			t.Errorf("metric %s: measurement %s (%s), want %s", m.Name, meas.Phase, meas.Message, wantPhase)
		}
		if strings.Contains(meas.Value, w.token) {
			t.Errorf("metric %s: the measurement value holds the token", m.Name)
		}
	}
}

func opOf(template string) string {
	if template == analysisconfig.PreviewedTemplate {
		return "preview"
	}
	return "up"
}

// templateMetrics resolves a template's metrics with the args an
// AnalysisRun would give them.
func templateMetrics(t *testing.T, templates []*rolloutsv1alpha1.AnalysisTemplate, name string, w *world, stack, commit string) []rolloutsv1alpha1.Metric {
	t.Helper()
	str := func(s string) *string { return &s }
	args := []rolloutsv1alpha1.Argument{
		{Name: analysisconfig.ArgNamespace, Value: str(w.ns)}, {Name: analysisconfig.ArgStack, Value: str(stack)},
		{Name: analysisconfig.ArgCommit, Value: str(commit)}, {Name: analysisconfig.ArgServer, Value: str(w.url)},
		{Name: analysisconfig.ArgToken, Value: str(w.token)}, {Name: analysisconfig.ArgTimeoutMeasurements, Value: str("180")},
	}
	var out []rolloutsv1alpha1.Metric
	for _, tpl := range templates {
		if tpl.Name != name {
			continue
		}
		for _, m := range tpl.Spec.Metrics {
			r, err := analysisutil.ResolveMetricArgs(m, args)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, *r)
		}
	}
	if len(out) != 2 {
		t.Fatalf("template %s has %d metrics", name, len(out))
	}
	return out
}

// authentication: no token is 401, a token without access 403, with the
// reason; the allowed token reads.
func (w *world) authentication(t *testing.T, sha string) {
	path := "/v1/namespaces/" + w.ns + "/stacks/applied/verification?commit=" + sha
	for _, tt := range []struct {
		name, token string
		code        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"garbage token", "not-a-token", http.StatusUnauthorized},
		{"token without access", w.denied, http.StatusForbidden},
		{"token with access", w.token, http.StatusOK},
	} {
		code, body := w.request(t, tt.token, path)
		if code != tt.code {
			t.Errorf("%s: HTTP %d, want %d: %s", tt.name, code, tt.code, body)
		}
		if tt.token != "" && strings.Contains(string(body), tt.token) {
			t.Errorf("%s: the answer holds the token", tt.name)
		}
	}
}

// pulumiCloud: the /v1/pulumi route answers from the (faithful) Pulumi Cloud
// with the token read from its Secret, once the caller may get the
// non-resource path; the Pulumi token never shows.
func (w *world) pulumiCloud(t *testing.T, sha string) {
	ctx := context.Background()
	now := time.Now().Unix()
	w.cloud.AddUpdate("acme", "web", "prod", cloudtest.Update{Kind: cloudtest.KindUpdate, Result: cloudtest.ResultSucceeded, StartTime: now - 60, EndTime: now - 30,
		Environment: map[string]string{"git.head": sha}, ResourceChanges: map[string]int{"create": 2, "same": 1}})
	path := "/v1/pulumi/acme/web/prod/verification?commit=" + sha + "&operation=up"
	if code, body := w.request(t, w.token, path); code != http.StatusForbidden || !strings.Contains(string(body), "/v1/pulumi/acme/web/prod") {
		t.Fatalf("without the non-resource grant: HTTP %d %s", code, body)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{GenerateName: "pulumi-cloud-verifier-"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/v1/pulumi/*"}, Verbs: []string{"get"}}}}
	if err := w.c.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{GenerateName: "pulumi-cloud-verifier-"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "verifier", Namespace: w.ns}}}
	if err := w.c.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.c.Delete(ctx, binding); _ = w.c.Delete(ctx, role) })
	// The denial is cached for a few seconds.
	var body []byte
	eventually(t, 30*time.Second, "the grant to take effect", func() (bool, error) {
		var code int
		code, body = w.request(t, w.token, path)
		return code == http.StatusOK, fmt.Errorf("HTTP %d %s", code, body)
	})
	var r verification.Result
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	if r.Phase != verification.PhaseSucceeded || r.Stack.Organization != "acme" || r.Update == nil || r.Update.Changes == nil || r.Update.Changes.Create != 2 {
		t.Fatalf("answer %s", body)
	}
	if strings.Contains(string(body), cloudToken) {
		t.Fatal("the answer holds the Pulumi access token")
	}
}
