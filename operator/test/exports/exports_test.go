package exports

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/export"
	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/logbuf"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// The chain's programs: net has a plain, a structured and a secret output;
// app reads net's cidr and exports its url; edge reads app's url.
const (
	netProgram = `name: net
runtime: yaml
config:
  cidr:
    type: string
resources:
  rec:
    type: stackflowtest:index:Record
    properties:
      name: net
      content: ${cidr}
outputs:
  cidr: ${rec.content}
  meta:
    zone: zone-a
    subnets:
      - ${rec.content}-a
      - ${rec.content}-b
  password:
    fn::secret: s3cret-${rec.content}
`
	appProgram = `name: app
runtime: yaml
config:
  cidr:
    type: string
resources:
  rec:
    type: stackflowtest:index:Record
    properties:
      name: app
      content: app in ${cidr}
outputs:
  url: http://app.${cidr}
`
	edgeProgram = `name: edge
runtime: yaml
config:
  appUrl:
    type: string
resources:
  rec:
    type: stackflowtest:index:Record
    properties:
      name: edge
      content: edge to ${appUrl}
`
	// secretPrefix begins the secret output's value: it must appear in the
	// exported Secret and nowhere else.
	secretPrefix = "s3cret-"
)

func get(obj client.Object) error {
	return suite.CP.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
}

func waitStack(t *testing.T, s *pulumiv1.Stack, what string, cond func(*pulumiv1.Stack) bool) {
	t.Helper()
	substrate.Eventually(t, 3*time.Minute, s.Name+" "+what, func() (bool, error) {
		if err := get(s); err != nil {
			return false, err
		}
		c, _ := json.Marshal(s.Status.Conditions)
		x, _ := json.Marshal(s.Status.Exports)
		return cond(s), fmt.Errorf("conditions %s, exports %s", c, x)
	})
}

func condition(s *pulumiv1.Stack, typ string) *metav1.Condition {
	return apimeta.FindStatusCondition(s.Status.Conditions, typ)
}

// exportedAt: Ready, the last update at sha, and its outputs exported.
func exportedAt(sha string) func(*pulumiv1.Stack) bool {
	return func(s *pulumiv1.Stack) bool {
		c, lu, x := condition(s, pulumiv1.ReadyCondition), s.Status.LastUpdate, s.Status.Exports
		return c != nil && c.Status == metav1.ConditionTrue && s.Status.ObservedGeneration == s.Generation &&
			lu != nil && lu.LastSuccessfulCommit == sha && x != nil && x.Update == lu.Name && x.Reason == ""
	}
}

// readyAt: Ready with the last update at sha.
func readyAt(sha string) func(*pulumiv1.Stack) bool {
	return func(s *pulumiv1.Stack) bool {
		c, lu := condition(s, pulumiv1.ReadyCondition), s.Status.LastUpdate
		return c != nil && c.Status == metav1.ConditionTrue && s.Status.ObservedGeneration == s.Generation && lu != nil && lu.LastSuccessfulCommit == sha
	}
}

func mutate(t testing.TB, obj client.Object, change func()) {
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

func create(t testing.TB, obj client.Object) {
	t.Helper()
	if err := suite.CP.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

func literal(v string) apiextensionsv1.JSON { return apiextensionsv1.JSON{Raw: []byte(`"` + v + `"`)} }

// history is the backend's record of a stack's updates, oldest first.
func history(t *testing.T, e *operatortest.Env, repo *gitrepo.Repo, stack string) []auto.UpdateSummary {
	t.Helper()
	st := e.PE.Stack(t, repo.Work, stack)
	h, err := st.History(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := 0, len(h)-1; i < j; i, j = i+1, j-1 {
		h[i], h[j] = h[j], h[i]
	}
	return h
}

func updateTimes(t *testing.T, u auto.UpdateSummary) (start, end time.Time) {
	t.Helper()
	start, err := time.Parse(time.RFC3339, u.StartTime)
	if err != nil || u.EndTime == nil {
		t.Fatalf("update %d: start %q, end %v: %v", u.Version, u.StartTime, u.EndTime, err)
	}
	if end, err = time.Parse(time.RFC3339, *u.EndTime); err != nil {
		t.Fatal(err)
	}
	return start, end
}

// before fails unless update a (of one stack) ended no later than update b
// (of another) started.
func before(t *testing.T, what string, a, b auto.UpdateSummary) {
	t.Helper()
	_, aEnd := updateTimes(t, a)
	bStart, _ := updateTimes(t, b)
	if aEnd.After(bStart) {
		t.Errorf("%s: the first ended at %s, after the second started at %s", what, aEnd, bStart)
	}
}

// TestExportsFeedAChainInOrder: net exports a plain, a structured and a
// secret output to a ConfigMap and a Secret (mapping, paths, labels, the
// hash annotation); app reads net's ConfigMap, edge reads app's: a change
// of net's output flows to edge in order, each applied once; a net update
// with the same outputs deploys nothing downstream; a secret mapped into
// the ConfigMap is refused with nothing written; the secret value is found
// in the Secret and nowhere else; deleting the chain destroys edge, then
// app, then net.
func TestExportsFeedAChainInOrder(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	var logs logbuf.Buffer
	operatortest.StartOperatorLogging(t, suite.CP.Config, e.Opts, zap.New(zap.UseDevMode(true), zap.WriteTo(&logs)))
	files := func(program string) map[string]string {
		return map[string]string{"Pulumi.yaml": program, ".gitignore": "Pulumi.*.yaml\n"}
	}
	netRepo, appRepo, edgeRepo := gitrepo.NewIn(t, t.TempDir(), "net"), gitrepo.NewIn(t, t.TempDir(), "app"), gitrepo.NewIn(t, t.TempDir(), "edge")
	net1 := netRepo.Commit(t, "net", files(netProgram))
	app1 := appRepo.Commit(t, "app", files(appProgram))
	edge1 := edgeRepo.Commit(t, "edge", files(edgeProgram))

	netKeys := []pulumiv1.ExportKey{
		{Key: "CIDR", Output: "cidr"}, {Key: "ZONE", Output: "meta", Path: "zone"},
		{Key: "SUBNET_B", Output: "meta", Path: "subnets[1]"}, {Key: "meta.json", Output: "meta"},
	}
	net := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "net"}, Spec: pulumiv1.StackSpec{
		Stack: "net", GitSource: &pulumiv1.GitSource{ProjectRepo: netRepo.URL(), Branch: "main"}, DestroyOnFinalize: true,
		Config: map[string]apiextensionsv1.JSON{"cidr": literal("10.0.0.0/16")},
		Exports: &pulumiv1.StackExports{
			ConfigMap: &pulumiv1.ExportObject{Name: "net-outputs", Labels: map[string]string{"team": "network"},
				Annotations: map[string]string{"owner": "platform"}, Keys: netKeys},
			Secret: &pulumiv1.ExportObject{Name: "net-secrets", Keys: []pulumiv1.ExportKey{{Key: "PASSWORD", Output: "password"}, {Key: "CIDR", Output: "cidr"}}},
		},
	}}
	app := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "app"}, Spec: pulumiv1.StackSpec{
		Stack: "app", GitSource: &pulumiv1.GitSource{ProjectRepo: appRepo.URL(), Branch: "main"}, DestroyOnFinalize: true,
		ConfigRef:     map[string]pulumiv1.ConfigMapRef{"cidr": {Name: "net-outputs", Key: "CIDR"}},
		Prerequisites: []pulumiv1.PrerequisiteRef{{Name: "net"}},
		Exports:       &pulumiv1.StackExports{ConfigMap: &pulumiv1.ExportObject{Name: "app-outputs", Keys: []pulumiv1.ExportKey{{Key: "URL", Output: "url"}}}},
	}}
	edge := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "edge"}, Spec: pulumiv1.StackSpec{
		Stack: "edge", GitSource: &pulumiv1.GitSource{ProjectRepo: edgeRepo.URL(), Branch: "main"}, DestroyOnFinalize: true,
		ConfigRef:     map[string]pulumiv1.ConfigMapRef{"appUrl": {Name: "app-outputs", Key: "URL"}},
		Prerequisites: []pulumiv1.PrerequisiteRef{{Name: "app"}},
	}}
	// Created downstream first: each waits for what it reads.
	create(t, edge)
	create(t, app)
	create(t, net)

	// 1. The chain applies in order.
	waitStack(t, net, "exported at its first commit", exportedAt(net1))
	waitStack(t, app, "exported at its first commit", exportedAt(app1))
	waitStack(t, edge, "ready at its first commit", readyAt(edge1))
	if got, _ := e.PE.Record(t, "edge"); got != "edge to http://app.10.0.0.0/16" {
		t.Fatalf("edge's record %q: the chain did not carry net's output", got)
	}
	hNet, hApp, hEdge := history(t, e, netRepo, "net"), history(t, e, appRepo, "app"), history(t, e, edgeRepo, "edge")
	if len(hNet) != 1 || len(hApp) != 1 || len(hEdge) != 1 {
		t.Fatalf("first round: updates net %d, app %d, edge %d; want one each", len(hNet), len(hApp), len(hEdge))
	}
	before(t, "net before app", hNet[0], hApp[0])
	before(t, "app before edge", hApp[0], hEdge[0])

	// 2. The objects: mapping, paths, JSON for an object, labels,
	// annotations, the hash, the Stack as owner; the secret only in the
	// Secret.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "net-outputs"}}
	if err := get(cm); err != nil {
		t.Fatal(err)
	}
	wantCM := map[string]string{"CIDR": "10.0.0.0/16", "ZONE": "zone-a", "SUBNET_B": "10.0.0.0/16-b",
		"meta.json": `{"subnets":["10.0.0.0/16-a","10.0.0.0/16-b"],"zone":"zone-a"}`}
	if fmt.Sprint(cm.Data) != fmt.Sprint(wantCM) {
		t.Errorf("ConfigMap data %v; want %v", cm.Data, wantCM)
	}
	if cm.Labels["team"] != "network" || cm.Annotations["owner"] != "platform" || cm.Annotations[pulumiv1.ExportedByAnnotation] != "net" ||
		cm.Annotations[pulumiv1.ContentHashAnnotation] != export.Hash(nil, wantCM) || net.Status.Exports.ConfigMap.Hash != export.Hash(nil, wantCM) {
		t.Errorf("ConfigMap labels %v, annotations %v, status %+v", cm.Labels, cm.Annotations, net.Status.Exports.ConfigMap)
	}
	if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != net.UID || cm.OwnerReferences[0].Controller == nil || !*cm.OwnerReferences[0].Controller {
		t.Errorf("ConfigMap owners %+v: want the Stack as controller (deletionPolicy Delete)", cm.OwnerReferences)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "net-secrets"}}
	if err := get(sec); err != nil {
		t.Fatal(err)
	}
	if string(sec.Data["PASSWORD"]) != secretPrefix+"10.0.0.0/16" || string(sec.Data["CIDR"]) != "10.0.0.0/16" || len(sec.Data) != 2 || sec.Type != corev1.SecretTypeOpaque {
		t.Errorf("Secret %s data keys %d, type %s", sec.Name, len(sec.Data), sec.Type)
	}
	if string(net.Status.Outputs["password"].Raw) != `"[secret]"` {
		t.Errorf("status.outputs.password %s", net.Status.Outputs["password"].Raw)
	}

	// 3. net's output changes: net, then app, then edge apply it, once each.
	mutate(t, net, func() { net.Spec.Config["cidr"] = literal("10.1.0.0/16") })
	waitStack(t, edge, "ready with net's new output", func(s *pulumiv1.Stack) bool {
		got, _ := e.PE.Record(t, "edge")
		return readyAt(edge1)(s) && got == "edge to http://app.10.1.0.0/16"
	})
	waitStack(t, app, "exported again", exportedAt(app1))
	hNet, hApp, hEdge = history(t, e, netRepo, "net"), history(t, e, appRepo, "app"), history(t, e, edgeRepo, "edge")
	if len(hNet) != 2 || len(hApp) != 2 || len(hEdge) != 2 {
		t.Fatalf("after net's change: updates net %d, app %d, edge %d; want two each", len(hNet), len(hApp), len(hEdge))
	}
	before(t, "net's change before app's", hNet[1], hApp[1])
	before(t, "app's change before edge's", hApp[1], hEdge[1])

	// 4. A net commit with the same outputs: net deploys it and exports
	// the same data, which writes nothing, so nothing downstream runs.
	if err := get(cm); err != nil {
		t.Fatal(err)
	}
	cmVersion, appUpdate := cm.ResourceVersion, app.Status.LastUpdate.Name
	net2 := netRepo.Commit(t, "docs", map[string]string{"README.md": "the network\n"})
	waitStack(t, net, "exported at the README commit", exportedAt(net2))
	if err := get(cm); err != nil || cm.ResourceVersion != cmVersion {
		t.Fatalf("net-outputs rewritten with the same outputs (version %s, was %s): %v", cm.ResourceVersion, cmVersion, err)
	}
	if err := get(app); err != nil || app.Status.LastUpdate.Name != appUpdate || app.Status.CurrentUpdate != nil {
		t.Fatalf("app ran after an upstream update with the same outputs: last %s (was %s), current %+v", app.Status.LastUpdate.Name, appUpdate, app.Status.CurrentUpdate)
	}

	// 5. A secret output mapped into the ConfigMap is refused: nothing of
	// that update is written, the Stack is Stalled naming the output.
	if err := get(sec); err != nil {
		t.Fatal(err)
	}
	secVersion := sec.ResourceVersion
	mutate(t, net, func() {
		net.Spec.Exports.ConfigMap.Keys = append(net.Spec.Exports.ConfigMap.Keys, pulumiv1.ExportKey{Key: "LEAK", Output: "password"})
	})
	waitStack(t, net, "stalled on the refused export", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.StalledCondition)
		return c != nil && c.Reason == pulumiv1.StalledExportFailedReason && s.Status.ObservedGeneration == s.Generation
	})
	if x := net.Status.Exports; x.Reason != pulumiv1.ExportRefusedReason || !strings.Contains(x.Message, `output "password" is a secret`) ||
		!strings.Contains(condition(net, pulumiv1.StalledCondition).Message, `key "LEAK"`) || x.ConfigMap != nil {
		t.Fatalf("refused export %+v", x)
	}
	if err := get(cm); err != nil || cm.ResourceVersion != cmVersion || cm.Data["LEAK"] != "" {
		t.Fatalf("net-outputs written by a refused export: %v", err)
	}
	if err := get(sec); err != nil || sec.ResourceVersion != secVersion {
		t.Fatalf("net-secrets written by a refused export: %v", err)
	}
	mutate(t, net, func() { net.Spec.Exports.ConfigMap.Keys = netKeys })
	waitStack(t, net, "exported again without the refused key", exportedAt(net2))

	// 6. The secret value is in the Secret and nowhere else: no status,
	// event, ConfigMap, Update, Workspace or log line holds it.
	var found []string
	for _, list := range []client.ObjectList{&pulumiv1.StackList{}, &corev1.EventList{}, &corev1.ConfigMapList{}} {
		if err := suite.CP.Client.List(ctx, list, client.InNamespace(e.NS)); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(list)
		if bytes.Contains(b, []byte(secretPrefix)) {
			found = append(found, fmt.Sprintf("%T", list))
		}
	}
	if strings.Contains(logs.String(), secretPrefix) {
		found = append(found, "the operator's log")
	}
	if len(found) > 0 {
		t.Fatalf("the secret output's value is in %v", found)
	}
	var events corev1.EventList
	if err := suite.CP.Client.List(ctx, &events, client.InNamespace(e.NS)); err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, ev := range events.Items {
		if ev.InvolvedObject.Name == "net" {
			reasons[ev.Reason]++
		}
	}
	if reasons[pulumiv1.EventReasonExported] < 3 || reasons[pulumiv1.StalledExportFailedReason] != 1 {
		t.Errorf("net's events by reason %v: want an Exported per export, one ExportFailed", reasons)
	}

	// 7. Deleting the chain destroys edge, then app, then net: net waits
	// for app, naming it.
	for _, s := range []*pulumiv1.Stack{net, app, edge} {
		if err := suite.CP.Client.Delete(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	waitStack(t, net, "waiting for its dependents", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.ReconcilingCondition)
		return c != nil && c.Reason == pulumiv1.ReconcilingDependentsExistReason &&
			strings.Contains(c.Message, "app lists net as a prerequisite") && strings.Contains(c.Message, "app reads ConfigMap net-outputs, exported by net")
	})
	for _, s := range []*pulumiv1.Stack{edge, app, net} {
		substrate.Eventually(t, 3*time.Minute, s.Name+" gone", func() (bool, error) {
			err := get(s)
			return apierrors.IsNotFound(err), err
		})
	}
	hNet, hApp, hEdge = history(t, e, netRepo, "net"), history(t, e, appRepo, "app"), history(t, e, edgeRepo, "edge")
	last := func(h []auto.UpdateSummary) auto.UpdateSummary { return h[len(h)-1] }
	for name, h := range map[string][]auto.UpdateSummary{"net": hNet, "app": hApp, "edge": hEdge} {
		if last(h).Kind != "destroy" {
			t.Fatalf("%s's last backend update is a %s, not a destroy", name, last(h).Kind)
		}
	}
	before(t, "edge destroyed before app", last(hEdge), last(hApp))
	before(t, "app destroyed before net", last(hApp), last(hNet))
	if len(hApp) != 3 || len(hEdge) != 3 {
		t.Errorf("app ran %d, edge %d backend updates: want two ups and a destroy each", len(hApp), len(hEdge))
	}
}

// TestExportsRetainAndNeverOverwrite: an object of the exported name that
// the Stack did not create is never overwritten (Stalled ExportConflict);
// exported under a free name with deletionPolicy Retain, the objects have
// no owner and outlive the Stack.
func TestExportsRetainAndNeverOverwrite(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	operatortest.StartOperator(t, suite.CP.Config, e.Opts)
	repo := gitrepo.New(t)
	sha := repo.Commit(t, "net", map[string]string{"Pulumi.yaml": netProgram, ".gitignore": "Pulumi.*.yaml\n"})
	taken := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "taken"}, Data: map[string]string{"mine": "yes"}}
	create(t, taken)
	s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "solo"}, Spec: pulumiv1.StackSpec{
		Stack: "solo", GitSource: &pulumiv1.GitSource{ProjectRepo: repo.URL(), Branch: "main"},
		Config: map[string]apiextensionsv1.JSON{"cidr": literal("10.9.0.0/16")},
		Exports: &pulumiv1.StackExports{DeletionPolicy: pulumiv1.ExportRetain,
			ConfigMap: &pulumiv1.ExportObject{Name: "taken", Keys: []pulumiv1.ExportKey{{Key: "CIDR", Output: "cidr"}}},
			Secret:    &pulumiv1.ExportObject{Name: "solo-secrets", Keys: []pulumiv1.ExportKey{{Key: "PASSWORD", Output: "password"}}},
		},
	}}
	create(t, s)
	waitStack(t, s, "stalled on the taken name", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.StalledCondition)
		return c != nil && c.Reason == pulumiv1.StalledExportFailedReason && s.Status.Exports != nil && s.Status.Exports.Reason == pulumiv1.ExportConflictReason
	})
	if !strings.Contains(s.Status.Exports.Message, "ConfigMap taken exists and was not created by this Stack") {
		t.Errorf("conflict message %q", s.Status.Exports.Message)
	}
	if err := get(taken); err != nil || fmt.Sprint(taken.Data) != "map[mine:yes]" || taken.Annotations[pulumiv1.ExportedByAnnotation] != "" {
		t.Fatalf("the foreign ConfigMap was touched: %v %v", taken.Data, err)
	}
	if err := get(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "solo-secrets"}}); !apierrors.IsNotFound(err) {
		t.Fatalf("the Secret of a refused export exists (%v): nothing of it should be written", err)
	}

	mutate(t, s, func() { s.Spec.Exports.ConfigMap.Name = "solo-outputs" })
	waitStack(t, s, "exported under a free name", exportedAt(sha))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "solo-outputs"}}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: "solo-secrets"}}
	for _, o := range []client.Object{cm, sec} {
		if err := get(o); err != nil {
			t.Fatal(err)
		}
		if len(o.GetOwnerReferences()) != 0 {
			t.Errorf("%s has owners %v with deletionPolicy Retain", o.GetName(), o.GetOwnerReferences())
		}
	}
	if err := suite.CP.Client.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	substrate.Eventually(t, time.Minute, "solo gone", func() (bool, error) {
		err := get(s)
		return apierrors.IsNotFound(err), err
	})
	if err := get(cm); err != nil || cm.Data["CIDR"] != "10.9.0.0/16" {
		t.Fatalf("retained ConfigMap after the Stack's deletion: %v %v", cm.Data, err)
	}
	if err := get(sec); err != nil || string(sec.Data["PASSWORD"]) != secretPrefix+"10.9.0.0/16" {
		t.Fatalf("retained Secret after the Stack's deletion: %v", err)
	}
}

// TestDependencyCycleIsReportedOnBoth: a reads b's export and b reads a's;
// both say so, and neither runs.
func TestDependencyCycleIsReportedOnBoth(t *testing.T) {
	e := newEnv(t)
	operatortest.StartOperator(t, suite.CP.Config, e.Opts)
	repo := gitrepo.New(t)
	repo.Commit(t, "app", map[string]string{"Pulumi.yaml": appProgram, ".gitignore": "Pulumi.*.yaml\n"})
	mk := func(name, reads string) *pulumiv1.Stack {
		return &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: e.NS, Name: name}, Spec: pulumiv1.StackSpec{
			Stack: name, GitSource: &pulumiv1.GitSource{ProjectRepo: repo.URL(), Branch: "main"},
			ConfigRef: map[string]pulumiv1.ConfigMapRef{"cidr": {Name: reads + "-out", Key: "URL"}},
			Exports:   &pulumiv1.StackExports{ConfigMap: &pulumiv1.ExportObject{Name: name + "-out", Keys: []pulumiv1.ExportKey{{Key: "URL", Output: "url"}}}},
		}}
	}
	a, b := mk("a", "b"), mk("b", "a")
	create(t, a)
	create(t, b)
	for _, s := range []*pulumiv1.Stack{a, b} {
		other := map[string]string{"a": "b", "b": "a"}[s.Name]
		waitStack(t, s, "stalled on the cycle", func(s *pulumiv1.Stack) bool {
			c := condition(s, pulumiv1.StalledCondition)
			return c != nil && c.Reason == pulumiv1.StalledDependencyCycleReason &&
				strings.Contains(c.Message, fmt.Sprintf("%s reads ConfigMap %s-out, exported by %s", s.Name, other, other)) &&
				strings.Contains(c.Message, fmt.Sprintf("%s reads ConfigMap %s-out, exported by %s", other, s.Name, s.Name))
		})
		if s.Status.LastUpdate != nil || s.Status.CurrentUpdate != nil || s.Status.UpdateSequence != 0 {
			t.Errorf("%s ran an update in a cycle", s.Name)
		}
	}
}
