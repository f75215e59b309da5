package stack

import (
	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/export"
)

// ExportDue names the update whose outputs spec.exports still has to write:
// the last update, when it was a successful up or refresh (the two that
// produce outputs) and status.exports does not record it yet. Each such
// update is exported once (or refused once); a failed write leaves it due.
func ExportDue(s *pulumiv1.Stack) (string, bool) {
	lu := s.Status.LastUpdate
	if s.Spec.Exports == nil || lu == nil || lu.State != pulumiv1.SucceededStackStateMessage ||
		(lu.Type != autov1alpha1.UpType && lu.Type != autov1alpha1.RefreshType) {
		return "", false
	}
	if e := s.Status.Exports; e != nil && e.Update == lu.Name {
		return "", false
	}
	return lu.Name, true
}

// ExportFailed: the last update's outputs were refused (status.exports has
// a reason), so the Stack, though up to date, is not Ready: what reads its
// exports would read an older update's values.
func ExportFailed(s *pulumiv1.Stack) bool {
	e, lu := s.Status.Exports, s.Status.LastUpdate
	return s.Spec.Exports != nil && e != nil && e.Reason != "" && lu != nil && e.Update == lu.Name
}

// ExportsCurrent: the Stack exports nothing, or its objects hold the
// outputs of its last successful up or refresh.
func ExportsCurrent(s *pulumiv1.Stack) bool {
	if s.Spec.Exports == nil {
		return true
	}
	_, due := ExportDue(s)
	return !due && !ExportFailed(s)
}

// ExportMappings are spec.exports' keys as export.Render takes them.
func ExportMappings(e *pulumiv1.StackExports) []export.Mapping {
	var ms []export.Mapping
	for _, o := range []struct {
		obj *pulumiv1.ExportObject
		to  export.Target
	}{{e.ConfigMap, export.ConfigMap}, {e.Secret, export.Secret}} {
		if o.obj == nil {
			continue
		}
		for _, k := range o.obj.Keys {
			ms = append(ms, export.Mapping{Key: k.Key, Output: k.Output, Path: k.Path, To: o.to})
		}
	}
	return ms
}
