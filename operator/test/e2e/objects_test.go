package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
)

// recordProgram is a YAML program with one test-provider record whose content,
// name, delay and failure come from configuration.
const recordProgram = `name: e2e
runtime: yaml
config:
  content:
    type: string
  recordName:
    type: string
  sleep:
    type: integer
    default: 0
  failOn:
    type: string
    default: ""
resources:
  rec:
    type: stackflowtest:index:Record
    properties:
      name: ${recordName}
      content: ${content}
      sleepSeconds: ${sleep}
      failOn: ${failOn}
outputs:
  content: ${rec.content}
  secretContent:
    fn::secret: ${rec.content}
`

func jsonValue(v any) *apiextensionsv1.JSON {
	b, _ := json.Marshal(v)
	return &apiextensionsv1.JSON{Raw: b}
}

// stackConfig builds WorkspaceStack config items from key/value pairs.
func stackConfig(kv ...any) []autov1alpha1.ConfigItem {
	var items []autov1alpha1.ConfigItem
	for i := 0; i+1 < len(kv); i += 2 {
		items = append(items, autov1alpha1.ConfigItem{Key: kv[i].(string), Value: jsonValue(kv[i+1])})
	}
	return items
}

func newWorkspace(ns, name, repoURL string, cfg []autov1alpha1.ConfigItem) *autov1alpha1.Workspace {
	return &autov1alpha1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: autov1alpha1.WorkspaceSpec{
			Git:    &autov1alpha1.GitSource{URL: repoURL, Ref: "main"},
			Stacks: []autov1alpha1.WorkspaceStack{{Name: "dev", Config: cfg}},
		},
	}
}

func newUpdate(ns, name, ws string, typ autov1alpha1.UpdateType) *autov1alpha1.Update {
	return &autov1alpha1.Update{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       autov1alpha1.UpdateSpec{WorkspaceName: ws, StackName: "dev", Type: typ},
	}
}

// waitWorkspaceReady waits until the workspace is Ready for its generation.
func waitWorkspaceReady(t testing.TB, ws *autov1alpha1.Workspace, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("workspace %s ready", ws.Name), func() (bool, error) {
		if err := get(t, ws); err != nil {
			return false, err
		}
		c := apimeta.FindStatusCondition(ws.Status.Conditions, autov1alpha1.WorkspaceReady)
		if c == nil {
			return false, nil
		}
		return c.Status == metav1.ConditionTrue && ws.Status.ObservedGeneration == ws.Generation, fmt.Errorf("%s: %s", c.Reason, c.Message)
	})
}

// runUpdate creates an Update and waits for it to complete.
func runUpdate(t testing.TB, u *autov1alpha1.Update, timeout time.Duration) *autov1alpha1.Update {
	t.Helper()
	if err := cp.Client.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	waitComplete(t, u, timeout)
	return u
}

func waitComplete(t testing.TB, u *autov1alpha1.Update, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("update %s complete", u.Name), func() (bool, error) {
		if err := get(t, u); err != nil {
			return false, err
		}
		return apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeComplete), nil
	})
}

func succeeded(u *autov1alpha1.Update) bool {
	return apimeta.IsStatusConditionFalse(u.Status.Conditions, autov1alpha1.UpdateConditionTypeFailed)
}

func reason(u *autov1alpha1.Update) string {
	if c := apimeta.FindStatusCondition(u.Status.Conditions, autov1alpha1.UpdateConditionTypeComplete); c != nil {
		return c.Reason
	}
	return ""
}

// autoUpdateList wraps the Update list type for listing in tests.
type autoUpdateList struct {
	autov1alpha1.UpdateList
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
