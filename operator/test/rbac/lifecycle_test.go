package rbac

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/local"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// program writes one record from config: content, a ConfigMap value and a
// Secret value, and outputs the record's content.
const program = `name: rbac
runtime: yaml
config:
  recordName:
    type: string
  content:
    type: string
  fromConfigMap:
    type: string
  password:
    type: string
resources:
  rec:
    type: stackflowtest:index:Record
    properties:
      name: ${recordName}
      content: ${content}-${fromConfigMap}-${password}
outputs:
  content: ${rec.content}
  name: ${recordName}
`

func stackConfig(kv ...string) map[string]apiextensionsv1.JSON {
	m := map[string]apiextensionsv1.JSON{}
	for i := 0; i+1 < len(kv); i += 2 {
		b, _ := json.Marshal(kv[i+1])
		m[kv[i]] = apiextensionsv1.JSON{Raw: b}
	}
	return m
}

// waitStack waits until cond holds for the Stack.
func waitStack(t *testing.T, c client.Client, s *pulumiv1.Stack, timeout time.Duration, what string, cond func(*pulumiv1.Stack) bool) {
	t.Helper()
	substrate.Eventually(t, timeout, s.Name+" "+what, func() (bool, error) {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(s), s); err != nil {
			return false, err
		}
		b, _ := json.Marshal(s.Status.Conditions)
		return cond(s), fmt.Errorf("conditions %s", b)
	})
}

func readyAt(rev string) func(*pulumiv1.Stack) bool {
	return func(s *pulumiv1.Stack) bool {
		c := apimeta.FindStatusCondition(s.Status.Conditions, pulumiv1.ReadyCondition)
		return c != nil && c.Status == metav1.ConditionTrue && s.Status.LastUpdate != nil &&
			s.Status.LastUpdate.LastSuccessfulCommit == rev && s.Status.ObservedGeneration == s.Generation
	}
}

// mutate applies change to the stored obj, retrying on conflicts with the
// operator's writes.
func mutate(t *testing.T, c client.Client, obj client.Object, change func()) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change()
		return c.Update(context.Background(), obj)
	}); err != nil {
		t.Fatal(err)
	}
}

// TestStackLifecycleAsServiceAccount runs the operator (local runtime) as its
// ServiceAccount with only the generated roles, through a Stack's lifecycle:
// created and Ready with its outputs Secret written, a spec change
// redeployed, a rotated Secret redeployed (Secrets are polled, not watched)
// and its outputs exported to a ConfigMap and a Secret (created, updated),
// deleted with destroyOnFinalize. The API server refuses the operator
// nothing, and the ServiceAccount may not list Secrets.
func TestStackLifecycleAsServiceAccount(t *testing.T) {
	cp := controlPlane(t)
	ctx := context.Background()
	opNS, ns := cp.Namespace(t), cp.Namespace(t)
	cfg, refused := operatorIdentity(t, opNS)

	// Least privilege, seen from the ServiceAccount.
	sa := saClient(t, cfg)
	if err := sa.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)); !apierrors.IsForbidden(err) {
		t.Fatalf("the operator's ServiceAccount may list Secrets (err %v): the role must not grant it", err)
	}

	pe := substrate.NewPulumi(t)
	root := t.TempDir()
	t.Cleanup(func() { local.StopAll(root) })
	startOperator(t, cfg, operator.Options{
		Runtime: operator.RuntimeLocal, LocalRoot: root, AgentBinary: filepath.Join(bin, "agent"),
		PulumiRoot: pe.Paths.PulumiRoot, AgentEnv: pe.EnvVars(), ArtifactDir: t.TempDir(),
		OperatorNamespace: opNS, SecretPollInterval: 2 * time.Second,
	}, opNS)

	repo := gitrepo.New(t)
	sha1 := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": program})
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, StringData: map[string]string{"password": "pw1"}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Data: map[string]string{"value": "cm1"}}
	for _, o := range []client.Object{sec, cm} {
		if err := cp.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "least"}, Spec: pulumiv1.StackSpec{
		Stack: "least", GitSource: &pulumiv1.GitSource{ProjectRepo: repo.URL(), Commit: sha1}, DestroyOnFinalize: true,
		Config:    stackConfig("recordName", "least", "content", "v1"),
		ConfigRef: map[string]pulumiv1.ConfigMapRef{"fromConfigMap": {Name: "app", Key: "value"}},
		SecretRefs: map[string]pulumiv1.ResourceRef{"password": {SelectorType: pulumiv1.ResourceSelectorSecret,
			ResourceSelector: pulumiv1.ResourceSelector{SecretRef: &pulumiv1.SecretSelector{Name: "db", Key: "password"}}}},
		Exports: &pulumiv1.StackExports{
			ConfigMap: &pulumiv1.ExportObject{Name: "least-out", Keys: []pulumiv1.ExportKey{{Key: "NAME", Output: "name"}}},
			Secret:    &pulumiv1.ExportObject{Name: "least-secrets", Keys: []pulumiv1.ExportKey{{Key: "CONTENT", Output: "content"}}},
		},
	}}
	if err := cp.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	record := func(want string) func(*pulumiv1.Stack) bool {
		return func(st *pulumiv1.Stack) bool {
			got, _ := pe.Record(t, "least")
			return readyAt(st.Spec.Commit)(st) && got == want
		}
	}
	waitStack(t, cp.Client, s, 3*time.Minute, "ready", record("v1-cm1-pw1"))

	// The outputs Secret, written by the operator and read back into status
	// (masked: the output derives from secret config).
	var outs corev1.Secret
	if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: s.Status.LastUpdate.Name + "-stack-outputs"}, &outs); err != nil {
		t.Fatalf("outputs secret: %v", err)
	}
	if string(outs.Data["content"]) != `"v1-cm1-pw1"` || string(s.Status.Outputs["content"].Raw) != `"[secret]"` {
		t.Fatalf("outputs: secret %q, status %s", outs.Data["content"], s.Status.Outputs["content"].Raw)
	}

	// A spec change: a new commit and config.
	sha2 := repo.Commit(t, "v2", map[string]string{"Pulumi.yaml": program, "README": "v2"})
	mutate(t, cp.Client, s, func() {
		s.Spec.Commit = sha2
		s.Spec.Config = stackConfig("recordName", "least", "content", "v2")
	})
	waitStack(t, cp.Client, s, 3*time.Minute, "redeployed at the new commit", record("v2-cm1-pw1"))

	// A rotated Secret is deployed without a watch on Secrets.
	mutate(t, cp.Client, sec, func() { sec.Data = map[string][]byte{"password": []byte("pw2")} })
	waitStack(t, cp.Client, s, 3*time.Minute, "redeployed with the rotated Secret", record("v2-cm1-pw2"))

	// The exports were created, then updated, by the operator.
	waitStack(t, cp.Client, s, time.Minute, "exported the rotated output", func(st *pulumiv1.Stack) bool {
		return st.Status.Exports != nil && st.Status.Exports.Update == st.Status.LastUpdate.Name && st.Status.Exports.Reason == ""
	})
	var exported corev1.Secret
	var exportedCM corev1.ConfigMap
	if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "least-secrets"}, &exported); err != nil || string(exported.Data["CONTENT"]) != "v2-cm1-pw2" {
		t.Fatalf("exported Secret: %v", err)
	}
	if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "least-out"}, &exportedCM); err != nil || exportedCM.Data["NAME"] != "least" {
		t.Fatalf("exported ConfigMap %v: %v", exportedCM.Data, err)
	}

	// The Lease shows the replica led as the ServiceAccount.
	var lease coordinationv1.Lease
	if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: opNS, Name: operator.LeaderElectionID}, &lease); err != nil ||
		lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "rbac-test" {
		t.Fatalf("leader election Lease: %v %+v", err, lease.Spec)
	}

	if err := cp.Client.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	substrate.Eventually(t, 3*time.Minute, "the Stack deleted", func() (bool, error) {
		err := cp.Client.Get(ctx, client.ObjectKeyFromObject(s), s)
		return apierrors.IsNotFound(err), err
	})
	if _, ok := pe.Record(t, "least"); ok {
		t.Fatal("destroyOnFinalize left the record: the destroy did not run")
	}
	assertNoForbidden(t, refused)
}
