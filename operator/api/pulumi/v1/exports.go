package v1

import autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"

// The one reading of a Stack's export state, shared by the operator (which
// acts on it) and the analysis service (which reports it).

// ExportDue names the update whose outputs spec.exports still has to write:
// the last update, when it was a successful up or refresh (the two that
// produce outputs) and status.exports does not record it yet. Each such
// update is exported once (or refused once); a failed write leaves it due.
func (s *Stack) ExportDue() (string, bool) {
	lu := s.Status.LastUpdate
	if s.Spec.Exports == nil || lu == nil || lu.State != SucceededStackStateMessage ||
		(lu.Type != autov1alpha1.UpType && lu.Type != autov1alpha1.RefreshType) {
		return "", false
	}
	if e := s.Status.Exports; e != nil && e.Update == lu.Name {
		return "", false
	}
	return lu.Name, true
}

// ExportFailed: the last update's outputs were refused (status.exports has
// a reason for it), so the Stack, though up to date, is not Ready: what
// reads its exports would read an older update's values.
func (s *Stack) ExportFailed() bool {
	e, lu := s.Status.Exports, s.Status.LastUpdate
	return s.Spec.Exports != nil && e != nil && e.Reason != "" && lu != nil && e.Update == lu.Name
}

// ExportsCurrent: the Stack exports nothing, or its objects hold the
// outputs of its last successful up or refresh.
func (s *Stack) ExportsCurrent() bool {
	if s.Spec.Exports == nil {
		return true
	}
	_, due := s.ExportDue()
	return !due && !s.ExportFailed()
}
