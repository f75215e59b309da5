package verification

import (
	"strings"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// exportState is what became of the outputs of the Stack's last update
// under spec.exports: "" when there is nothing to export (no spec.exports,
// or the last update was not a successful up or refresh, the two that make
// outputs), else pending, refused or exported.
//
// It reads the operator's own rule (Stack.ExportDue, Stack.ExportFailed in
// the API package).
func exportState(s *pulumiv1.Stack) string {
	lu := s.Status.LastUpdate
	switch {
	case s.Spec.Exports == nil || lu == nil || lu.State != pulumiv1.SucceededStackStateMessage ||
		lu.Type != autov1alpha1.UpType && lu.Type != autov1alpha1.RefreshType:
		return ""
	case s.ExportFailed():
		return ExportStateRefused
	}
	if _, due := s.ExportDue(); due {
		return ExportStatePending
	}
	return ExportStateExported
}

// describeExports describes the export of the Stack's last update; nil when
// there is nothing to export. The objects are those spec.exports names;
// a hash only once one holds that update's outputs.
func describeExports(s *pulumiv1.Stack) *Exports {
	state := exportState(s)
	if state == "" {
		return nil
	}
	d := &Exports{Update: s.Status.LastUpdate.Name, State: state}
	var rec *pulumiv1.StackExportsStatus
	if state != ExportStatePending {
		rec = s.Status.Exports
		d.Reason = rec.Reason
		d.Time = timePtr(rec.Time)
	}
	object := func(spec *pulumiv1.ExportObject, written *pulumiv1.ExportedObject) *ExportedObject {
		if spec == nil {
			return nil
		}
		o := &ExportedObject{Name: spec.Name}
		if state == ExportStateExported && written != nil && written.Name == spec.Name {
			o.Hash = written.Hash
		}
		return o
	}
	var cm, sec *pulumiv1.ExportedObject
	if rec != nil {
		cm, sec = rec.ConfigMap, rec.Secret
	}
	d.ConfigMap = object(s.Spec.Exports.ConfigMap, cm)
	d.Secret = object(s.Spec.Exports.Secret, sec)
	return d
}

// exportsVerdict: the Stack's last update applied the commit (it
// succeeded); a Stack with spec.exports has applied it once that update's
// outputs are exported too. It sets r.Exports and answers Running
// (ExportsPending) while they are due, Failed (ExportFailed) when the
// operator refused them; done is false when the Stack exports nothing or
// the export is done.
func exportsVerdict(r Result, s *pulumiv1.Stack, op Operation) (_ Result, done bool) {
	r.Exports = describeExports(s)
	e := r.Exports
	switch {
	case e == nil || e.State == ExportStateExported:
		return r, false
	case e.State == ExportStatePending:
		return r.with(PhaseRunning, ReasonExportsPending, "%s of %s succeeded; the outputs of update %s are not yet written to %s",
			op, shortOf(r.ObservedCommit), e.Update, exportedObjects(e)), true
	}
	// The operator's message names the output and key, never a value; it
	// is quoted as any other component's text is.
	return r.with(PhaseFailed, ReasonExportFailed, "%s of %s succeeded, but its outputs were not exported (%s): %s",
		op, shortOf(r.ObservedCommit), e.Reason, Detail(s.Status.Exports.Message)), true
}

// exportedObjects names an export's objects: "ConfigMap web-outputs and
// Secret web-secrets".
func exportedObjects(e *Exports) string {
	var objs []string
	if e.ConfigMap != nil {
		objs = append(objs, "ConfigMap "+e.ConfigMap.Name)
	}
	if e.Secret != nil {
		objs = append(objs, "Secret "+e.Secret.Name)
	}
	return strings.Join(objs, " and ")
}
