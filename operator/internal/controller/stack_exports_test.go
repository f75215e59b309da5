package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/export"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
)

// exportingStack is a Stack at a pinned commit exporting to ConfigMap out
// and Secret out-secrets, whose up app-2 has just succeeded with outputs
// (url plain, password secret), and that up's outputs Secret.
func exportingStack(t *testing.T) (*pulumiv1.Stack, *autov1alpha1.Update, *corev1.Secret) {
	t.Helper()
	s := &pulumiv1.Stack{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", Generation: 1, UID: "stack-uid", Finalizers: []string{StackFinalizer}},
		Spec: pulumiv1.StackSpec{Stack: "dev", GitSource: &pulumiv1.GitSource{ProjectRepo: "https://git.example.com/acme/app.git", Commit: stepsCommit},
			Exports: &pulumiv1.StackExports{
				ConfigMap: &pulumiv1.ExportObject{Name: "out", Keys: []pulumiv1.ExportKey{{Key: "URL", Output: "url"}}},
				Secret:    &pulumiv1.ExportObject{Name: "out-secrets", Keys: []pulumiv1.ExportKey{{Key: "PASSWORD", Output: "password"}}},
			}},
	}
	u, err := stack.Update(s, stack.Plan{Number: 2, Type: autov1alpha1.UpType, Purpose: pulumiv1.UpdatePurposeDeploy, Revision: stepsCommit, Message: "Stackflow: test"})
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	_ = pulumiv1.AddToScheme(scheme)
	if err := controllerutil.SetControllerReference(s, u, scheme); err != nil {
		t.Fatal(err)
	}
	cu := stack.Current(u)
	s.Status.CurrentUpdate, s.Status.UpdateSequence = &cu, 2
	u.Status.Outputs = "app-2-stack-outputs"
	u.Status.StartTime, u.Status.EndTime = metav1.NewTime(stepsNow.Add(-time.Minute)), metav1.NewTime(stepsNow.Add(-time.Second))
	markEnded(u, autov1alpha1.UpdateReasonSucceeded, false, "update succeeded")
	outs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app-2-stack-outputs", Annotations: map[string]string{SecretsAnnotation: `["password"]`}},
		Data: map[string][]byte{"url": []byte(`"https://app.example.com"`), "password": []byte(`"pw-secret-value"`)}}
	return s, u, outs
}

// TestExportRetriedUntilWritten: a failed write of an export is shown
// (Reconciling, TransientError, a Warning event) and retried; the Update,
// whose outputs Secret holds the values, is kept until the export is
// recorded, then released; the export is reported once (Exported), and a
// reconcile after it writes nothing.
func TestExportRetriedUntilWritten(t *testing.T) {
	s, u, outs := exportingStack(t)
	unavailable := &failOnce{err: apierrors.NewServiceUnavailable("etcd is busy")}
	writes := 0
	funcs := interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*corev1.ConfigMap); ok {
				if err := unavailable.fail(true); err != nil {
					return err
				}
				writes++
			}
			if sec, ok := obj.(*corev1.Secret); ok && sec.Name == "out-secrets" {
				writes++
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			switch obj.(type) {
			case *corev1.ConfigMap, *corev1.Secret:
				writes++
			}
			return c.Update(ctx, obj, opts...)
		},
	}
	e := newStackStepEnv(t, funcs, s, u, outs)

	// 1. The result is recorded; the write fails: shown, the Update kept.
	e.reconcile(t, "failed write", true)
	st := e.stored(t)
	rc := apimeta.FindStatusCondition(st.Status.Conditions, pulumiv1.ReconcilingCondition)
	if st.Status.LastUpdate == nil || st.Status.LastUpdate.Name != "app-2" || st.Status.Exports != nil ||
		rc == nil || rc.Reason != pulumiv1.ReconcilingTransientErrorReason || !strings.Contains(rc.Message, "export the outputs of app-2") {
		t.Fatalf("after the failed write: last update %+v, exports %+v, Reconciling %+v", st.Status.LastUpdate, st.Status.Exports, rc)
	}
	if ev := e.drainEvents(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning ") || !strings.Contains(ev[0], "export the outputs of app-2") {
		t.Errorf("failed write: events %q, want one warning saying it", ev)
	}
	var held autov1alpha1.Update
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(u), &held); err != nil || !controllerutil.ContainsFinalizer(&held, stack.ResultFinalizer) {
		t.Fatalf("the Update whose outputs are not exported was released (%v): its outputs Secret would go with it", err)
	}

	// 2. The retry writes both objects and records it; the Update is
	// released; one Exported event.
	e.reconcile(t, "retry", false)
	st = e.stored(t)
	x := st.Status.Exports
	wantCM := map[string]string{"URL": "https://app.example.com"}
	if x == nil || x.Update != "app-2" || x.Commit != stepsCommit || x.Reason != "" || x.ConfigMap == nil || x.ConfigMap.Hash != export.Hash(nil, wantCM) ||
		x.Secret == nil || x.Secret.Hash != export.Hash([]byte("test-key"), map[string]string{"PASSWORD": "pw-secret-value"}) {
		t.Fatalf("exports after the retry: %+v", x)
	}
	var cm corev1.ConfigMap
	var sec corev1.Secret
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "out"}, &cm); err != nil || cm.Data["URL"] != wantCM["URL"] ||
		cm.Annotations[pulumiv1.ExportedByAnnotation] != "app" || len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != "stack-uid" {
		t.Fatalf("ConfigMap %+v: %v", cm, err)
	}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "out-secrets"}, &sec); err != nil || string(sec.Data["PASSWORD"]) != "pw-secret-value" {
		t.Fatalf("Secret: %v", err)
	}
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(u), &held); err != nil || controllerutil.ContainsFinalizer(&held, stack.ResultFinalizer) {
		t.Fatalf("the exported Update is still held (%v)", err)
	}
	evs := e.drainEvents()
	if ex := eventsWith(evs, pulumiv1.EventReasonExported); len(ex) != 1 || !strings.Contains(ex[0], "exported the outputs of app-2 (5f3c2a1) to ConfigMap out (hash ") {
		t.Errorf("events %q: want one Exported", evs)
	}
	for _, ev := range evs {
		if strings.Contains(ev, "pw-secret-value") {
			t.Errorf("event %q holds the secret value", ev)
		}
	}

	// 3. Nothing more to write.
	before := writes
	e.reconcile(t, "after", false)
	if writes != before {
		t.Errorf("a reconcile after the export wrote %d more objects", writes-before)
	}
	if ev := eventsWith(e.drainEvents(), pulumiv1.EventReasonExported); len(ev) != 0 {
		t.Errorf("Exported again: %q", ev)
	}
}

// TestExportRefusal: a secret output mapped into the ConfigMap refuses the
// export, naming key and output: nothing is written, one ExportFailed
// warning, the Update released, and the up-to-date Stack Stalled
// (ExportFailed).
func TestExportRefusal(t *testing.T) {
	s, u, outs := exportingStack(t)
	s.Spec.Exports.ConfigMap.Keys = append(s.Spec.Exports.ConfigMap.Keys, pulumiv1.ExportKey{Key: "PW", Output: "password"})
	e := newStackStepEnv(t, interceptor.Funcs{}, s, u, outs)
	e.reconcile(t, "refused", false)
	st := e.stored(t)
	if x := st.Status.Exports; x == nil || x.Reason != pulumiv1.ExportRefusedReason || !strings.Contains(x.Message, `key "PW": output "password" is a secret`) {
		t.Fatalf("exports %+v", st.Status.Exports)
	}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "out"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ConfigMap was written by a refused export (%v)", err)
	}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "out-secrets"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Secret was written by a refused export (%v)", err)
	}
	evs := e.drainEvents()
	if ev := eventsWith(evs, pulumiv1.StalledExportFailedReason); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning ") {
		t.Errorf("events %q: want one ExportFailed warning", evs)
	}
	// Up to date, but its readers would read an older update's values.
	if c := apimeta.FindStatusCondition(st.Status.Conditions, pulumiv1.StalledCondition); c == nil || c.Reason != pulumiv1.StalledExportFailedReason || !strings.Contains(c.Message, `output "password"`) {
		t.Errorf("Stalled %+v: want ExportFailed naming the output", c)
	}
	if !st.ExportFailed() {
		t.Fatal("ExportFailed is false after a refusal: an up-to-date Stack would read Ready")
	}
	var held autov1alpha1.Update
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(u), &held); err != nil || controllerutil.ContainsFinalizer(&held, stack.ResultFinalizer) {
		t.Fatalf("the refused Update is still held (%v)", err)
	}
}

// TestExportConflictWritesNothing: the Secret's name is taken by an object
// the Stack did not create; the ConfigMap, which is free and comes first,
// is not written either (both are checked before either is written).
func TestExportConflictWritesNothing(t *testing.T) {
	s, u, outs := exportingStack(t)
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "out-secrets"}, Data: map[string][]byte{"mine": []byte("yes")}}
	e := newStackStepEnv(t, interceptor.Funcs{}, s, u, outs, foreign)
	e.reconcile(t, "conflict", false)
	st := e.stored(t)
	if x := st.Status.Exports; x == nil || x.Reason != pulumiv1.ExportConflictReason || !strings.Contains(x.Message, "Secret out-secrets exists and was not created by this Stack") {
		t.Fatalf("exports %+v", st.Status.Exports)
	}
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "out"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ConfigMap was written although the Secret's name is taken (%v)", err)
	}
	var sec corev1.Secret
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(foreign), &sec); err != nil || string(sec.Data["mine"]) != "yes" || len(sec.Data) != 1 {
		t.Errorf("the foreign Secret was touched: %v", err)
	}
}
