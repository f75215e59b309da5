package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/provider"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// program is one record. The test holds its second update (the test
// provider waits while the hold file exists) to move the Stack to another
// shard while it runs.
const program = `name: shards
runtime: yaml
config:
  content:
    type: string
resources:
  rec:
    type: stackflowtest:index:Record
    properties:
      name: moving
      content: ${content}
`

func get(obj client.Object) error {
	return suite.CP.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
}

func content(v string) map[string]apiextensionsv1.JSON {
	return map[string]apiextensionsv1.JSON{"content": {Raw: []byte(`"` + v + `"`)}}
}

func mutate(t *testing.T, obj client.Object, change func()) {
	t.Helper()
	substrate.Eventually(t, 30*time.Second, "update "+obj.GetName(), func() (bool, error) {
		if err := get(obj); err != nil {
			return false, err
		}
		change()
		err := suite.CP.Client.Update(context.Background(), obj)
		return err == nil, err
	})
}

// TestStackMovesBetweenShards: two operators, shard a and shard b. A Stack
// labelled a is deployed by a, its Workspace and Updates labelled a. It is
// relabelled b while a's update runs: b waits for that update's end (it
// says so), takes the Workspace and Update over, records the one update a
// applied, and deploys the next change itself; the backend holds one
// update per change. A Stack of shard b meanwhile is never touched by a.
func TestStackMovesBetweenShards(t *testing.T) {
	ctx := context.Background()
	pe := substrate.NewPulumi(t)
	ns := suite.CP.Namespace(t)
	hold := filepath.Join(t.TempDir(), "hold")
	release := func() {
		t.Helper()
		if err := os.Remove(hold); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	t.Cleanup(release)
	for _, shard := range []string{"a", "b"} {
		opts := operatortest.LocalOptions(t, pe, agentPath())
		opts.AgentEnv[provider.HoldEnv] = hold
		opts.WatchLabelSelector = labels.SelectorFromSet(labels.Set{pulumiv1.ShardLabel: shard})
		operatortest.StartOperator(t, suite.CP.Config, opts)
	}
	repo := gitrepo.New(t)
	sha := repo.Commit(t, "program", map[string]string{"Pulumi.yaml": program, ".gitignore": "Pulumi.*.yaml\n"})
	s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "moving", Labels: map[string]string{pulumiv1.ShardLabel: "a"}},
		Spec: pulumiv1.StackSpec{Stack: "moving", GitSource: &pulumiv1.GitSource{ProjectRepo: repo.URL(), Commit: sha}, Config: content("one")}}
	if err := suite.CP.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	applied := func(v string) func() (bool, error) {
		return func() (bool, error) {
			if err := get(s); err != nil {
				return false, err
			}
			c := apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.ReadyCondition)
			got, _ := pe.Record(t, "moving")
			b, _ := json.Marshal(s.Status.Conditions)
			return c != nil && c.Status == metav1.ConditionTrue && s.Status.ObservedGeneration == s.Generation && got == v,
				fmt.Errorf("record %q, conditions %s", got, b)
		}
	}
	substrate.Eventually(t, 3*time.Minute, "shard a deploys the Stack", applied("one"))
	shardOf(t, ns, "a", "moving", "moving-1")

	// A change; while its update runs (held) under shard a, the Stack moves
	// to b, which says it waits for that update; released, b records it.
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	mutate(t, s, func() { s.Spec.Config = content("two") })
	substrate.Eventually(t, time.Minute, "shard a running the second update", func() (bool, error) {
		if err := get(s); err != nil {
			return false, err
		}
		cu := s.Status.CurrentUpdate
		return cu != nil && cu.Name == "moving-2", fmt.Errorf("current update %+v", cu)
	})
	mutate(t, s, func() { s.Labels[pulumiv1.ShardLabel] = "b" })
	substrate.Eventually(t, time.Minute, "shard b to say it waits for shard a's update", func() (bool, error) {
		if err := get(s); err != nil {
			return false, err
		}
		c := apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.ReconcilingCondition)
		return c != nil && strings.Contains(c.Message, "runs under the Stack's former shard"), fmt.Errorf("Reconciling: %+v", c)
	})
	release()
	substrate.Eventually(t, 3*time.Minute, "shard b records the second update", func() (bool, error) {
		ok, err := applied("two")()
		return ok && s.Status.LastUpdate != nil && s.Status.LastUpdate.Name == "moving-2", err
	})
	shardOf(t, ns, "b", "moving", "moving-2")
	if s.Status.UpdateSequence != 2 {
		t.Fatalf("updateSequence %d after two changes: an update was started twice", s.Status.UpdateSequence)
	}

	// The next change is shard b's own.
	mutate(t, s, func() { s.Spec.Config = content("three") })
	substrate.Eventually(t, 3*time.Minute, "shard b deploys the third change", applied("three"))
	shardOf(t, ns, "b", "moving", "moving-3")
	st := pe.Stack(t, repo.Work, "moving")
	h, err := st.History(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ups := updatesOf(h); ups != 3 {
		t.Fatalf("backend history: %d updates for three changes (%+v): the handover ran one twice or lost one", ups, h)
	}
}

func updatesOf(h []auto.UpdateSummary) int {
	n := 0
	for _, u := range h {
		if u.Kind == "update" {
			n++
		}
	}
	return n
}

// shardOf fails unless the Stack's Workspace and Update carry shard's label.
func shardOf(t *testing.T, ns, shard, workspace, update string) {
	t.Helper()
	substrate.Eventually(t, 30*time.Second, "workspace and "+update+" in shard "+shard, func() (bool, error) {
		ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: workspace}}
		u := &autov1alpha1.Update{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: update}}
		if err := get(ws); err != nil {
			return false, err
		}
		if err := get(u); err != nil {
			return false, err
		}
		return ws.Labels[pulumiv1.ShardLabel] == shard && u.Labels[pulumiv1.ShardLabel] == shard,
			fmt.Errorf("workspace labels %v, update labels %v", ws.Labels, u.Labels)
	})
}
