package stack

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// chainStack is a Stack reading the ConfigMaps reads (key "k"), listing
// prerequisites, and exporting a ConfigMap named exports.
func chainStack(name, exports string, reads []string, prerequisites ...string) pulumiv1.Stack {
	s := pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: pulumiv1.StackSpec{Stack: name}}
	for i, r := range reads {
		if s.Spec.ConfigRef == nil {
			s.Spec.ConfigRef = map[string]pulumiv1.ConfigMapRef{}
		}
		s.Spec.ConfigRef[fmt.Sprintf("c%d", i)] = pulumiv1.ConfigMapRef{Name: r, Key: "k"}
	}
	for _, p := range prerequisites {
		s.Spec.Prerequisites = append(s.Spec.Prerequisites, pulumiv1.PrerequisiteRef{Name: p})
	}
	if exports != "" {
		s.Spec.Exports = &pulumiv1.StackExports{ConfigMap: &pulumiv1.ExportObject{Name: exports, Keys: []pulumiv1.ExportKey{{Key: "k", Output: "o"}}}}
	}
	return s
}

// world answers FindCycle's questions from a set of Stacks.
func world(stacks ...pulumiv1.Stack) func(string) ([]Dependency, error) {
	byName := map[string]*pulumiv1.Stack{}
	exporters := map[string][]string{}
	for i := range stacks {
		s := &stacks[i]
		byName[s.Name] = s
		for _, k := range Exported(s) {
			exporters[k] = append(exporters[k], s.Name)
		}
	}
	return func(name string) ([]Dependency, error) {
		s, ok := byName[name]
		if !ok {
			return nil, nil
		}
		return DependenciesOf(s, func(key string) []string { return exporters[key] }), nil
	}
}

func TestFindCycle(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stacks []pulumiv1.Stack
		start  string
		want   string // CycleMessage's middle; "" for no cycle
	}{
		{"a chain", []pulumiv1.Stack{chainStack("net", "net-out", nil), chainStack("app", "app-out", []string{"net-out"}, "net"), chainStack("edge", "", []string{"app-out"}, "app")}, "edge", ""},
		{"reading its own export", []pulumiv1.Stack{chainStack("self", "self-out", []string{"self-out"})}, "self", ""},
		{"a missing prerequisite", []pulumiv1.Stack{chainStack("app", "", nil, "gone")}, "app", ""},
		{"a diamond", []pulumiv1.Stack{chainStack("a", "a-out", nil), chainStack("b", "b-out", []string{"a-out"}), chainStack("c", "c-out", []string{"a-out"}), chainStack("d", "", []string{"b-out", "c-out"})}, "d", ""},
		{"two reading each other", []pulumiv1.Stack{chainStack("a", "a-out", []string{"b-out"}), chainStack("b", "b-out", []string{"a-out"})}, "a",
			"a reads ConfigMap b-out, exported by b; b reads ConfigMap a-out, exported by a"},
		{"prerequisites in a ring", []pulumiv1.Stack{chainStack("a", "", nil, "c"), chainStack("b", "", nil, "a"), chainStack("c", "", nil, "b")}, "a",
			"a lists c as a prerequisite; c lists b as a prerequisite; b lists a as a prerequisite"},
		{"mixed", []pulumiv1.Stack{chainStack("a", "a-out", nil, "b"), chainStack("b", "", []string{"a-out"})}, "b",
			"b reads ConfigMap a-out, exported by a; a lists b as a prerequisite"},
		{"a cycle beside, not through, start", []pulumiv1.Stack{chainStack("a", "", nil, "b"), chainStack("b", "", nil, "c"), chainStack("c", "", nil, "b")}, "a", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cycle, err := FindCycle(tc.start, world(tc.stacks...))
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if cycle != nil {
					t.Fatalf("cycle %v where there is none", cycle)
				}
				return
			}
			if got := CycleMessage(cycle); !strings.Contains(got, "dependency cycle: "+tc.want+": nothing runs") {
				t.Fatalf("CycleMessage = %q, want it to say %q", got, tc.want)
			}
		})
	}
}

func TestFindCycleBoundsAndErrors(t *testing.T) {
	// A chain longer than the bound ends the walk without a verdict.
	long := func(name string) ([]Dependency, error) {
		return []Dependency{{Stack: name, On: name + "x"}}, nil
	}
	if cycle, err := FindCycle("s", long); cycle != nil || err != nil {
		t.Fatalf("an endless chain: %v %v", cycle, err)
	}
	boom := errors.New("cache not synced")
	if _, err := FindCycle("s", func(string) ([]Dependency, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("error %v", err)
	}
}

func TestExportDue(t *testing.T) {
	up := func(name, state string, typ string) *pulumiv1.StackUpdateState {
		return &pulumiv1.StackUpdateState{Name: name, State: pulumiv1.StackUpdateStateMessage(state), Type: autov1alpha1.UpdateType(typ)}
	}
	exports := &pulumiv1.StackExports{ConfigMap: &pulumiv1.ExportObject{Name: "o", Keys: []pulumiv1.ExportKey{{Key: "k", Output: "o"}}}}
	for _, tc := range []struct {
		name            string
		spec            *pulumiv1.StackExports
		last            *pulumiv1.StackUpdateState
		status          *pulumiv1.StackExportsStatus
		due             string
		failed, current bool
	}{
		{"no exports", nil, up("s-1", "succeeded", "up"), nil, "", false, true},
		{"never updated", exports, nil, nil, "", false, true},
		{"an up to export", exports, up("s-1", "succeeded", "up"), nil, "s-1", false, false},
		{"a refresh to export", exports, up("s-2", "succeeded", "refresh"), &pulumiv1.StackExportsStatus{Update: "s-1"}, "s-2", false, false},
		{"exported", exports, up("s-1", "succeeded", "up"), &pulumiv1.StackExportsStatus{Update: "s-1"}, "", false, true},
		{"refused", exports, up("s-1", "succeeded", "up"), &pulumiv1.StackExportsStatus{Update: "s-1", Reason: pulumiv1.ExportRefusedReason}, "", true, false},
		{"refused, then a failed up", exports, up("s-2", "failed", "up"), &pulumiv1.StackExportsStatus{Update: "s-1", Reason: pulumiv1.ExportRefusedReason}, "", false, true},
		{"a failed up", exports, up("s-2", "failed", "up"), &pulumiv1.StackExportsStatus{Update: "s-1"}, "", false, true},
		{"a destroy", exports, up("s-3", "succeeded", "destroy"), &pulumiv1.StackExportsStatus{Update: "s-1"}, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &pulumiv1.Stack{Spec: pulumiv1.StackSpec{Exports: tc.spec}, Status: pulumiv1.StackStatus{LastUpdate: tc.last, Exports: tc.status}}
			due, ok := s.ExportDue()
			if due != tc.due || ok != (tc.due != "") || s.ExportFailed() != tc.failed || s.ExportsCurrent() != tc.current {
				t.Fatalf("ExportDue = %q %v, ExportFailed %v, ExportsCurrent %v; want %q, %v, %v", due, ok, s.ExportFailed(), s.ExportsCurrent(), tc.due, tc.failed, tc.current)
			}
		})
	}
}
