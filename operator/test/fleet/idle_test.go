package fleet

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// idleProgram writes one record, quickly.
const idleProgram = `name: idle
runtime: yaml
config:
  content:
    type: string
resources:
  rec:
    type: stackflowtest:index:Record
    properties:
      name: idle
      content: ${content}
`

// TestIdleWorkspaceRemovedAndWoken: with --workspace-idle-timeout, an
// up-to-date Stack's Workspace (and its agent) is removed once idle; the
// Stack stays Ready; the next change creates the Workspace again and is
// deployed. The figure logged is that next change's latency from the spec
// change to Ready, cold (a fresh workspace: checkout, install), beside the
// same change in a warm workspace.
func TestIdleWorkspaceRemovedAndWoken(t *testing.T) {
	ctx := context.Background()
	pe := substrate.NewPulumi(t)
	ns := suite.CP.Namespace(t)
	opts := operatortest.LocalOptions(t, pe, agentPath())
	opts.WorkspaceIdleTimeout = 3 * time.Second
	operatortest.StartOperator(t, suite.CP.Config, opts)
	repo := gitrepo.New(t)
	sha := repo.Commit(t, "program", map[string]string{"Pulumi.yaml": idleProgram, ".gitignore": "Pulumi.*.yaml\n"})
	s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "idle"},
		Spec: pulumiv1.StackSpec{Stack: "idle", GitSource: &pulumiv1.GitSource{ProjectRepo: repo.URL(), Commit: sha}, Config: content("one")}}
	if err := suite.CP.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	deployed := func(v string) func() (bool, error) {
		return func() (bool, error) {
			if err := get(s); err != nil {
				return false, err
			}
			c := apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.ReadyCondition)
			got, _ := pe.Record(t, "idle")
			return c != nil && c.Status == metav1.ConditionTrue && s.Status.ObservedGeneration == s.Generation && got == v,
				fmt.Errorf("record %q, Ready %+v", got, c)
		}
	}
	workspaceGone := func() (bool, error) {
		err := get(&autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "idle"}})
		return apierrors.IsNotFound(err), err
	}
	substrate.Eventually(t, 3*time.Minute, "the first change deployed", deployed("one"))

	// Warm: a change while the Workspace is still there (the idle timer
	// restarts with each update, so it is measured at once).
	start := time.Now()
	mutate(t, s, func() { s.Spec.Config = content("two") })
	substrate.Eventually(t, 2*time.Minute, "the second change deployed warm", deployed("two"))
	warm := time.Since(start)

	// Idle: the Workspace goes; the Stack stays Ready.
	substrate.Eventually(t, time.Minute, "the idle Workspace removed", workspaceGone)
	if err := get(s); err != nil {
		t.Fatal(err)
	}
	if c := apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.ReadyCondition); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("the Stack is not Ready once its Workspace is reclaimed: %+v", c)
	}

	// Woken: the next change creates the Workspace again and is deployed.
	start = time.Now()
	mutate(t, s, func() { s.Spec.Config = content("three") })
	substrate.Eventually(t, 3*time.Minute, "the third change deployed after the wake", deployed("three"))
	cold := time.Since(start)
	if s.Status.LastUpdate == nil || s.Status.LastUpdate.Name != "idle-3" {
		t.Fatalf("last update %+v: want idle-3, one update per change", s.Status.LastUpdate)
	}
	t.Logf("next change to Ready: warm workspace %s, woken (new workspace) %s", warm.Round(10*time.Millisecond), cold.Round(10*time.Millisecond))
}
