package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/stackflow-io/stackflow/internal/stackref"
	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/export"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
)

// reconcileExports writes the outputs of the last successful up or refresh
// to the objects spec.exports names, once per update (Stack.ExportDue). The
// Update, and with it its outputs Secret, is kept until its export is
// recorded (releaseUpdates), so a failed write is retried — returned as a
// transient error, shown in Reconciling — and never lost. A refusal (the
// mapping does not fit the outputs, or an object of that name is not the
// Stack's) is recorded in status.exports: nothing of that update is written,
// and the Stack, though up to date, is Stalled (ExportFailed) until an
// update exports again.
func (r *StackReconciler) reconcileExports(ctx context.Context, sc *stackScope) error {
	s := sc.stack
	if s.Spec.Exports == nil {
		s.Status.Exports = nil
		return nil
	}
	name, due := s.ExportDue()
	if !due {
		return nil
	}
	var u autov1alpha1.Update
	err := r.getWritten(ctx, types.NamespacedName{Namespace: s.Namespace, Name: name}, &u)
	if apierrors.IsNotFound(err) {
		// Only a forced removal gets here (the Update is kept until its
		// export is recorded): the next update exports.
		log.FromContext(ctx).Info("The outputs of the last update are gone; the next update exports", "update", name)
		return nil
	}
	if err != nil {
		return err
	}
	rec := &pulumiv1.StackExportsStatus{Update: name, Commit: s.Status.LastUpdate.LastAttemptedCommit, Time: metav1.NewTime(r.Now())}
	outs, err := r.rawOutputs(ctx, &u)
	if err != nil {
		return fmt.Errorf("read the outputs of %s to export them: %w", name, err)
	}
	data, err := export.Render(outs, stack.ExportMappings(s.Spec.Exports))
	var refused *export.RefusedError
	if errors.As(err, &refused) {
		rec.Reason, rec.Message = pulumiv1.ExportRefusedReason, fmt.Sprintf("the outputs of %s were not exported: %s", name, refused.Error())
		s.Status.Exports = rec
		return nil
	}
	if err != nil {
		return err
	}
	e := s.Spec.Exports
	var targets []*exportTarget
	if e.ConfigMap != nil {
		targets = append(targets, &exportTarget{obj: &corev1.ConfigMap{}, spec: e.ConfigMap, data: data.ConfigMap, hash: export.Hash(nil, data.ConfigMap)})
	}
	if e.Secret != nil {
		targets = append(targets, &exportTarget{obj: &corev1.Secret{}, spec: e.Secret, data: data.Secret, hash: export.Hash(r.DigestKey, data.Secret)})
	}
	// Both objects are read (and their ownership checked) before either is
	// written: an object of another's refuses the whole export.
	for _, t := range targets {
		if err := r.readExport(ctx, s, t); err != nil {
			return r.exportFailure(s, rec, name, err)
		}
	}
	for _, t := range targets {
		if err := r.writeExport(ctx, s, t); err != nil {
			return r.exportFailure(s, rec, name, err)
		}
		written := &pulumiv1.ExportedObject{Name: t.spec.Name, Hash: t.hash}
		if _, ok := t.obj.(*corev1.Secret); ok {
			rec.Secret = written
		} else {
			rec.ConfigMap = written
		}
	}
	log.FromContext(ctx).Info("Exported outputs", "update", name, "configMap", rec.ConfigMap, "secret", rec.Secret)
	s.Status.Exports = rec
	return nil
}

// exportConflict: an object of that name exists, and the Stack did not
// write it.
type exportConflict struct{ kind, name, by string }

func (e *exportConflict) Error() string {
	if e.by == "" {
		return fmt.Sprintf("%s %s exists and was not created by this Stack (no %s annotation): it is never overwritten; delete or rename it, or export to another name", e.kind, e.name, pulumiv1.ExportedByAnnotation)
	}
	return fmt.Sprintf("%s %s is exported by Stack %s: it is never overwritten; export to another name", e.kind, e.name, e.by)
}

// exportFailure records a conflict or a value the API server refuses as a
// refusal of the update's export; any other error is transient (retried,
// the Update kept).
func (r *StackReconciler) exportFailure(s *pulumiv1.Stack, rec *pulumiv1.StackExportsStatus, update string, err error) error {
	var conflict *exportConflict
	switch {
	case errors.As(err, &conflict):
		rec.Reason = pulumiv1.ExportConflictReason
	case apierrors.IsInvalid(err) || apierrors.IsRequestEntityTooLargeError(err):
		rec.Reason = pulumiv1.ExportRefusedReason
	default:
		return fmt.Errorf("export the outputs of %s: %w", update, err)
	}
	rec.ConfigMap, rec.Secret = nil, nil
	rec.Message = fmt.Sprintf("the outputs of %s were not exported: %v", update, err)
	s.Status.Exports = rec
	return nil
}

// rawOutputs reads an Update's outputs Secret as the agent wrote it: each
// output's JSON, and which are Pulumi secrets.
func (r *StackReconciler) rawOutputs(ctx context.Context, u *autov1alpha1.Update) (export.Outputs, error) {
	out := export.Outputs{Values: map[string]json.RawMessage{}, Secrets: map[string]bool{}}
	if u.Status.Outputs == "" {
		return out, nil
	}
	var sec corev1.Secret
	if err := r.getWritten(ctx, types.NamespacedName{Namespace: u.Namespace, Name: u.Status.Outputs}, &sec); err != nil {
		return out, err
	}
	var keys []string
	_ = jsonUnmarshal(sec.Annotations[SecretsAnnotation], &keys)
	for _, k := range keys {
		out.Secrets[k] = true
	}
	for k, v := range sec.Data {
		out.Values[k] = json.RawMessage(v)
	}
	return out, nil
}

// exportTarget is one object an export writes: its kind (obj, a ConfigMap
// or a Secret, read into by readExport), its spec, the data and its hash.
type exportTarget struct {
	obj    client.Object
	spec   *pulumiv1.ExportObject
	data   map[string]string
	hash   string
	exists bool
}

// readExport reads the object of t as stored, if it exists, and refuses
// one not marked as this Stack's (exportConflict): it is never touched.
func (r *StackReconciler) readExport(ctx context.Context, s *pulumiv1.Stack, t *exportTarget) error {
	kind := stackref.KindConfigMap
	reader := client.Reader(r.Client)
	if _, ok := t.obj.(*corev1.Secret); ok {
		// Secrets are never cached (see SetupWithManager).
		kind, reader = stackref.KindSecret, r.APIReader
	}
	err := reader.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: t.spec.Name}, t.obj)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	t.exists = err == nil
	if t.exists {
		if by := t.obj.GetAnnotations()[pulumiv1.ExportedByAnnotation]; by != s.Name {
			return &exportConflict{kind: kind, name: t.spec.Name, by: by}
		}
	}
	return nil
}

// writeExport creates or updates t's object (read by readExport) to hold
// exactly its data, with the spec's labels and annotations, the Stack's name
// and the content hash; owned by the Stack unless the deletion policy is
// Retain. Nothing is written when the object is already as wanted.
func (r *StackReconciler) writeExport(ctx context.Context, s *pulumiv1.Stack, t *exportTarget) error {
	obj := t.obj
	before := obj.DeepCopyObject().(client.Object)
	obj.SetNamespace(s.Namespace)
	obj.SetName(t.spec.Name)
	labels := maps.Clone(t.spec.Labels)
	annotations := maps.Clone(t.spec.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[pulumiv1.ExportedByAnnotation] = s.Name
	annotations[pulumiv1.ContentHashAnnotation] = t.hash
	obj.SetLabels(labels)
	obj.SetAnnotations(annotations)
	obj.SetOwnerReferences(exportOwners(obj.GetOwnerReferences(), s))
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		o.Data, o.BinaryData = t.data, nil
	case *corev1.Secret:
		o.Data, o.StringData = map[string][]byte{}, nil
		for k, v := range t.data {
			o.Data[k] = []byte(v)
		}
		if o.Type == "" {
			o.Type = corev1.SecretTypeOpaque
		}
	}
	if !t.exists {
		return r.Create(ctx, obj)
	}
	if equality.Semantic.DeepEqual(before, obj) {
		return nil
	}
	// The read resourceVersion makes it optimistic: a concurrent change
	// fails the write, which is retried.
	return r.Update(ctx, obj)
}

// exportOwners are an exported object's owner references: those it has but
// any Stack's, then the Stack as controller unless its deletion policy is
// Retain (a Stack of the same name adopts a retained object again).
func exportOwners(refs []metav1.OwnerReference, s *pulumiv1.Stack) []metav1.OwnerReference {
	gvk := pulumiv1.GroupVersion.WithKind("Stack")
	var out []metav1.OwnerReference
	for _, ref := range refs {
		if ref.Kind != gvk.Kind || ref.APIVersion != gvk.GroupVersion().String() {
			out = append(out, ref)
		}
	}
	if s.Spec.Exports.DeletionPolicy == pulumiv1.ExportRetain {
		return out
	}
	yes := true
	return append(out, metav1.OwnerReference{
		APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: s.Name, UID: s.UID,
		Controller: &yes, BlockOwnerDeletion: &yes,
	})
}

// exportDueFor: u is the update whose outputs the Stack has still to export
// (it is kept until then).
func exportDueFor(s *pulumiv1.Stack, u *autov1alpha1.Update) bool {
	name, due := s.ExportDue()
	return due && name == u.Name
}

// reportExports sends one event per stored export record: Exported, or
// ExportFailed (a Warning) with the refusal. Messages name objects, keys
// and outputs, never values.
func reportExports(rec record.EventRecorder, before, after *pulumiv1.Stack) {
	a, b := after.Status.Exports, before.Status.Exports
	if a == nil || b != nil && b.Update == a.Update && b.Reason == a.Reason {
		return
	}
	if a.Reason != "" {
		rec.Event(after, corev1.EventTypeWarning, pulumiv1.StalledExportFailedReason, conditionMessage(a.Message))
		return
	}
	var objs []string
	if a.ConfigMap != nil {
		objs = append(objs, fmt.Sprintf("ConfigMap %s (hash %s)", a.ConfigMap.Name, stack.ShortFingerprint(a.ConfigMap.Hash)))
	}
	if a.Secret != nil {
		objs = append(objs, fmt.Sprintf("Secret %s (hash %s)", a.Secret.Name, stack.ShortFingerprint(a.Secret.Hash)))
	}
	rec.Event(after, corev1.EventTypeNormal, pulumiv1.EventReasonExported,
		fmt.Sprintf("exported the outputs of %s (%s) to %s", a.Update, shortRev(a.Commit), strings.Join(objs, " and ")))
}
