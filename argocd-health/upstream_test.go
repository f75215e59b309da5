package argocdhealth

import (
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/argoproj/gitops-engine/pkg/health"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// upstreamStackHealth models the pulumi.com/Stack health check built into
// Argo CD 3.6 (argo-cd resource_customizations/pulumi.com/Stack/health.lua)
// by its rule: no status, or a status.observedGeneration other than
// metadata.generation, is Progressing; otherwise the first condition, in the
// list's order, that is True among Stalled, Reconciling and Ready decides
// (Degraded, Progressing, Healthy); otherwise Progressing. It is a model of
// the rule, not their script; TestUpstreamStackStates checks it against the
// answers upstream's own tests expect.
func upstreamStackHealth(obj *unstructured.Unstructured) health.HealthStatusCode {
	status, ok := obj.Object["status"].(map[string]any)
	if !ok || !sameNumber(status["observedGeneration"], obj.GetGeneration()) {
		return health.HealthStatusProgressing
	}
	conds, _ := status["conditions"].([]any)
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["status"] != "True" {
			continue
		}
		switch m["type"] {
		case "Stalled":
			return health.HealthStatusDegraded
		case "Reconciling":
			return health.HealthStatusProgressing
		case "Ready":
			return health.HealthStatusHealthy
		}
	}
	return health.HealthStatusProgressing
}

func sameNumber(v any, n int64) bool {
	switch x := v.(type) {
	case int64:
		return x == n
	case float64:
		return x == float64(n)
	}
	return false
}

type upstreamState struct {
	State    string                  `json:"state"`
	Upstream health.HealthStatusCode `json:"upstream"`
	Stack    map[string]any          `json:"stack"`
}

// TestUpstreamStackStates: on the states Argo CD 3.6's built-in Stack check
// is tested with (testdata/upstream, described anew), ours answers the same
// status, through gitops-engine as the application controller runs it.
func TestUpstreamStackStates(t *testing.T) {
	b, err := os.ReadFile("testdata/upstream/argocd-3.6-stack.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var states []upstreamState
	if err := yaml.Unmarshal(b, &states); err != nil {
		t.Fatal(err)
	}
	if len(states) != 4 {
		t.Fatalf("%d upstream states, want its 4", len(states))
	}
	for _, s := range states {
		t.Run(s.State, func(t *testing.T) {
			// Through JSON, as Argo CD decodes objects: integers stay
			// integers.
			b, err := json.Marshal(s.Stack)
			if err != nil {
				t.Fatal(err)
			}
			obj := parseObject(t, b)
			if got := upstreamStackHealth(obj); got != s.Upstream {
				t.Errorf("the model of the upstream check answers %s, upstream %s", got, s.Upstream)
			}
			ours, err := Health(obj)
			if err != nil {
				t.Fatal(err)
			}
			if ours.Status != s.Upstream {
				t.Errorf("ours: %s %q; upstream: %s", ours.Status, ours.Message, s.Upstream)
			}
		})
	}
}

// upstreamDisagreements are the fixtures on which ours deliberately answers
// another status than Argo CD 3.6's built-in check: upstream's answer, then
// ours. argocd-health/README.md ("Argo CD 3.6's built-in Stack check") has a
// row for each, saying why.
var upstreamDisagreements = map[string][2]health.HealthStatusCode{
	"captured/stack-retrying.yaml":                 {health.HealthStatusProgressing, health.HealthStatusDegraded},
	"captured/stack-retry-running.yaml":            {health.HealthStatusProgressing, health.HealthStatusDegraded},
	"captured/stack-drift-detected.yaml":           {health.HealthStatusHealthy, health.HealthStatusDegraded},
	"hand/stack-drift.yaml":                        {health.HealthStatusHealthy, health.HealthStatusDegraded},
	"captured/stack-reconcile-requested.yaml":      {health.HealthStatusHealthy, health.HealthStatusProgressing},
	"hand/stack-request-while-update-stalled.yaml": {health.HealthStatusDegraded, health.HealthStatusProgressing},
	"hand/stack-request-while-export-failed.yaml":  {health.HealthStatusDegraded, health.HealthStatusProgressing},
	"hand/stack-awaiting-approval.yaml":            {health.HealthStatusProgressing, health.HealthStatusSuspended},
}

// TestUpstreamStackDisagreementsDocumented runs ours and the model of
// upstream's check on every Stack fixture (but those being deleted, which
// gitops-engine answers before any script, and malformed ones) and checks
// that they differ exactly on upstreamDisagreements, each of which the
// README's table names.
func TestUpstreamStackDisagreementsDocumented(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]health.HealthStatusCode{}
	for _, f := range allFixtures(t) {
		obj := fixture(t, f)
		if obj.GetKind() != "Stack" || obj.GetDeletionTimestamp() != nil || strings.Contains(f, "malformed") {
			continue
		}
		ours, err := Health(obj)
		if err != nil {
			t.Fatal(err)
		}
		if up := upstreamStackHealth(obj); up != ours.Status {
			got[f] = [2]health.HealthStatusCode{up, ours.Status}
		}
	}
	var names []string
	for f := range got {
		names = append(names, f)
	}
	for f := range upstreamDisagreements {
		if _, ok := got[f]; !ok {
			names = append(names, f)
		}
	}
	sort.Strings(names)
	for _, f := range names {
		if got[f] != upstreamDisagreements[f] {
			t.Errorf("%s: upstream %s, ours %s; documented: %v", f, got[f][0], got[f][1], upstreamDisagreements[f])
		}
		if !strings.Contains(string(readme), "`"+f+"`") {
			t.Errorf("README.md's table of differences from Argo CD 3.6's Stack check does not name %s", f)
		}
	}
}
