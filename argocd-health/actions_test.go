package argocdhealth

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-cd/v2/util/lua"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	stackflowv1alpha1 "github.com/stackflow-io/stackflow/operator/api/stackflow/v1alpha1"
)

var stackActions = []string{"approve", "preview-off", "preview-on", "reconcile-now", "reject", "retry"}

// patchActions change the Stack itself; approve and reject create a
// PlanApproval (TestPlanActions).
var patchActions = []string{"preview-off", "preview-on", "reconcile-now", "retry"}

// enabledActions: the actions offered enabled for each Stack fixture (the
// others are listed, disabled).
var enabledActions = map[string][]string{
	"captured/stack-running.yaml":                  {"preview-on", "reconcile-now"},
	"captured/stack-succeeded.yaml":                {"preview-on", "reconcile-now"},
	"captured/stack-drift-check-running.yaml":      {"preview-on", "reconcile-now"},
	"captured/stack-succeeded-program.yaml":        {"preview-on", "reconcile-now"},
	"captured/stack-preview-succeeded.yaml":        {"preview-off", "reconcile-now"},
	"captured/stack-retrying.yaml":                 {"preview-on", "reconcile-now", "retry"},
	"captured/stack-retry-running.yaml":            {"preview-on", "reconcile-now"},
	"captured/stack-stalled.yaml":                  {"preview-on", "reconcile-now", "retry"},
	"captured/stack-stalled-source.yaml":           {"preview-on", "reconcile-now", "retry"},
	"captured/stack-waiting-prerequisite.yaml":     {"preview-on", "reconcile-now"},
	"captured/stack-new-generation.yaml":           {"preview-on", "reconcile-now", "retry"},
	"captured/stack-reconcile-requested.yaml":      {"preview-on", "reconcile-now"},
	"captured/stack-drift-detected.yaml":           {"preview-on", "reconcile-now"},
	"captured/stack-deleting-update-running.yaml":  {},
	"captured/stack-deleting-destroy-running.yaml": {},
	"captured/stack-deleting-destroy-failed.yaml":  {},
	"hand/stack-no-status.yaml":                    {"preview-on", "reconcile-now"},
	"hand/stack-drift.yaml":                        {"preview-on", "reconcile-now"},
	"hand/stack-awaiting-approval.yaml":            {"approve", "preview-on", "reconcile-now", "reject"},
	"hand/stack-preview-changes.yaml":              {"preview-off", "reconcile-now"},
	"hand/stack-conflict-retry.yaml":               {"preview-on", "reconcile-now", "retry"},
	"hand/stack-request-while-source-stalled.yaml": {"preview-on", "reconcile-now", "retry"},
	"hand/stack-request-while-update-stalled.yaml": {"preview-on", "reconcile-now", "retry"},
	"hand/stack-running-older-generation.yaml":     {"preview-on", "reconcile-now"},
	"hand/stack-deleting-no-destroy.yaml":          {},
	"hand/stack-deleting-waiting-workspace.yaml":   {},
	"hand/stack-deleting-stale-stall.yaml":         {},
	"hand/stack-unknown-reasons.yaml":              {"preview-on", "reconcile-now"},
	"hand/stack-stalled-unknown-reason.yaml":       {"preview-on", "reconcile-now", "retry"},
	"hand/stack-exported.yaml":                     {"preview-on", "reconcile-now"},
	"hand/stack-export-failed.yaml":                {"preview-on", "reconcile-now", "retry"},
	"hand/stack-request-while-export-failed.yaml":  {"preview-on", "reconcile-now", "retry"},
	"hand/stack-dependency-cycle.yaml":             {"preview-on", "reconcile-now", "retry"},
	"hand/stack-deleting-dependents-exist.yaml":    {},
	"hand/stack-malformed-status-string.yaml":      {"preview-on", "reconcile-now"},
	"hand/stack-malformed-conditions-map.yaml":     {"preview-on", "reconcile-now"},
	"hand/stack-malformed-condition-items.yaml":    {"preview-on", "reconcile-now"},
}

func stackFixtures(t *testing.T) []string {
	var out []string
	for _, f := range allFixtures(t) {
		if strings.Contains(f, "/stack-") {
			out = append(out, f)
		}
	}
	return out
}

// TestActionDiscovery runs the discovery script as Argo CD's API server does
// (GetResourceActionDiscovery, ExecuteResourceActionDiscovery).
func TestActionDiscovery(t *testing.T) {
	vm := lua.VM{ResourceOverrides: overrides(t)}
	for _, f := range stackFixtures(t) {
		want, ok := enabledActions[f]
		if !ok {
			t.Errorf("%s has no row in enabledActions", f)
			continue
		}
		obj := fixture(t, f)
		scripts, err := vm.GetResourceActionDiscovery(obj)
		if err != nil || len(scripts) != 1 {
			t.Fatalf("%s: discovery scripts %d, %v", f, len(scripts), err)
		}
		actions, err := vm.ExecuteResourceActionDiscovery(obj, scripts)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var names, enabled []string
		for _, a := range actions {
			names = append(names, a.Name)
			if !a.Disabled {
				enabled = append(enabled, a.Name)
			}
			if a.DisplayName == "" || !strings.HasPrefix(a.IconClass, "fa fa-fw fa-") {
				t.Errorf("%s: action %+v lacks a display name or icon", f, a)
			}
		}
		sort.Strings(names)
		sort.Strings(enabled)
		if fmt.Sprint(names) != fmt.Sprint(stackActions) || fmt.Sprint(enabled) != fmt.Sprint(want) {
			t.Errorf("%s: actions %v, enabled %v; want all of %v, enabled %v", f, names, enabled, stackActions, want)
		}
	}
}

var requestValue = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z(-1)?$`)

// runAction runs an action as Argo CD's API server does (GetResourceAction,
// ExecuteResourceAction) and returns the new object and the JSON merge patch
// the server would send.
func runAction(t *testing.T, obj *unstructured.Unstructured, action string) (*unstructured.Unstructured, string) {
	t.Helper()
	vm := lua.VM{ResourceOverrides: overrides(t)}
	def, err := vm.GetResourceAction(obj, action)
	if err != nil {
		t.Fatalf("action %s: %v", action, err)
	}
	impacted, err := vm.ExecuteResourceAction(obj.DeepCopy(), def.ActionLua)
	if err != nil {
		t.Fatalf("action %s: %v", action, err)
	}
	if len(impacted) != 1 || impacted[0].K8SOperation != lua.PatchOperation {
		t.Fatalf("action %s returned %d objects (%v); want the Stack, patched", action, len(impacted), impacted)
	}
	live, _ := json.Marshal(obj)
	next, _ := json.Marshal(impacted[0].UnstructuredObj)
	patch, err := jsonpatch.CreateMergePatch(live, next)
	if err != nil {
		t.Fatal(err)
	}
	return impacted[0].UnstructuredObj, string(patch)
}

// TestActions: each action on each Stack fixture changes exactly what it
// says (the merge patch Argo CD would send), is a no-op (an empty patch)
// exactly when discovery shows it disabled (Argo CD runs disabled actions
// when asked), and returns an object that still decodes into the operator's
// Stack type, equal to the original but for that change.
func TestActions(t *testing.T) {
	for _, f := range stackFixtures(t) {
		enabled := map[string]bool{}
		for _, a := range enabledActions[f] {
			enabled[a] = true
		}
		for _, action := range patchActions {
			t.Run(f+"/"+action, func(t *testing.T) {
				obj := fixture(t, f)
				next, patch := runAction(t, obj, action)
				if !enabled[action] {
					if patch != "{}" {
						t.Fatalf("disabled action patches %s", patch)
					}
					return
				}
				var want string
				switch action {
				case "preview-on":
					want = `{"spec":{"preview":true}}`
				case "preview-off":
					want = `{"spec":{"preview":false}}`
				default:
					v := next.GetAnnotations()[pulumiv1.ReconcileRequestAnnotation]
					if !requestValue.MatchString(v) || v == obj.GetAnnotations()[pulumiv1.ReconcileRequestAnnotation] {
						t.Fatalf("reconciliation request %q (was %q)", v, obj.GetAnnotations()[pulumiv1.ReconcileRequestAnnotation])
					}
					want = fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, pulumiv1.ReconcileRequestAnnotation, v)
				}
				if patch != want {
					t.Fatalf("patch %s, want %s", patch, want)
				}
				if strings.Contains(f, "malformed") {
					return
				}
				before, after := decodeStack(t, obj, strings.HasPrefix(f, "captured/")), decodeStack(t, next, strings.HasPrefix(f, "captured/"))
				switch action {
				case "preview-on":
					before.Spec.Preview = true
				case "preview-off":
					before.Spec.Preview = false
				default:
					if before.Annotations == nil {
						before.Annotations = map[string]string{}
					}
					before.Annotations[pulumiv1.ReconcileRequestAnnotation] = after.Annotations[pulumiv1.ReconcileRequestAnnotation]
				}
				if !equality.Semantic.DeepEqual(before, after) {
					t.Fatalf("the action changed more than it should:\nbefore %+v\nafter  %+v", before, after)
				}
			})
		}
	}
}

// decodeStack decodes an object into the operator's Stack type; strict
// rejects fields the type does not have.
func decodeStack(t *testing.T, u *unstructured.Unstructured, strict bool) *pulumiv1.Stack {
	t.Helper()
	b, err := json.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if strict {
		dec.DisallowUnknownFields()
	}
	s := &pulumiv1.Stack{}
	if err := dec.Decode(s); err != nil {
		t.Fatalf("the object does not decode into a Stack: %v\n%s", err, b)
	}
	return s
}

// TestReconcileRequestIsNew: a request made in the same second as the
// previous one still changes the annotation.
func TestReconcileRequestIsNew(t *testing.T) {
	for _, action := range []string{"reconcile-now", "retry"} {
		for attempt := 0; ; attempt++ {
			obj := fixture(t, "captured/stack-stalled.yaml")
			now := time.Now().UTC().Format("2006-01-02T15:04:05Z")
			obj.SetAnnotations(map[string]string{pulumiv1.ReconcileRequestAnnotation: now})
			next, _ := runAction(t, obj, action)
			got := next.GetAnnotations()[pulumiv1.ReconcileRequestAnnotation]
			if time.Now().UTC().Format("2006-01-02T15:04:05Z") != now && attempt < 5 {
				continue // the second turned during the action: try again
			}
			if got != now+"-1" {
				t.Errorf("%s in the same second as request %q set %q", action, now, got)
			}
			break
		}
	}
}

// TestPlanActions: approve and reject, on each Stack fixture, create one
// PlanApproval of the plan the Stack awaits approval for, as Argo CD's
// identity, and nothing else; where discovery shows them disabled (no plan
// awaiting approval, a Stack being deleted) they fail with a message saying
// why, creating nothing.
func TestPlanActions(t *testing.T) {
	vm := lua.VM{ResourceOverrides: overrides(t)}
	for _, f := range stackFixtures(t) {
		enabled := map[string]bool{}
		for _, a := range enabledActions[f] {
			enabled[a] = true
		}
		for action, decision := range map[string]string{"approve": "Approved", "reject": "Rejected"} {
			t.Run(f+"/"+action, func(t *testing.T) {
				obj := fixture(t, f)
				def, err := vm.GetResourceAction(obj, action)
				if err != nil {
					t.Fatal(err)
				}
				impacted, err := vm.ExecuteResourceAction(obj.DeepCopy(), def.ActionLua)
				if !enabled[action] {
					if err == nil || !regexp.MustCompile(`awaits no approval|being deleted`).MatchString(err.Error()) {
						t.Fatalf("disabled %s returned %v, %v; want an error saying why", action, impacted, err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if len(impacted) != 1 || impacted[0].K8SOperation != lua.CreateOperation {
					t.Fatalf("%s returned %v; want one object to create", action, impacted)
				}
				fp, _, _ := unstructured.NestedString(obj.Object, "status", "plan", "fingerprint")
				b, _ := json.Marshal(impacted[0].UnstructuredObj)
				dec := json.NewDecoder(bytes.NewReader(b))
				dec.DisallowUnknownFields()
				pa := &stackflowv1alpha1.PlanApproval{}
				if err := dec.Decode(pa); err != nil {
					t.Fatalf("not a PlanApproval: %v\n%s", err, b)
				}
				want := stackflowv1alpha1.PlanApprovalSpec{StackName: obj.GetName(), Fingerprint: fp, Decision: stackflowv1alpha1.PlanDecision(decision),
					Approver: ArgoCDServerIdentity, Comment: pa.Spec.Comment}
				if pa.APIVersion != "stackflow.io/v1alpha1" || pa.Kind != "PlanApproval" || pa.Namespace != obj.GetNamespace() ||
					pa.Name != "argocd-"+action+"-"+fp || pa.Spec != want || !strings.Contains(pa.Spec.Comment, "ResourceActionRan") {
					t.Fatalf("%s created %s", action, b)
				}
			})
		}
	}
}
