package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
)

// DefaultDriftInterval is the time between drift checks when the spec does
// not say.
const DefaultDriftInterval = 5 * time.Minute

// Drift condition reasons.
const (
	driftReasonDetected    = "DriftDetected"
	driftReasonCheckFailed = "DriftCheckFailed"
)

// finishDriftCheck records the result of a drift check that ran; busy reports
// one still running (nothing else may run on the stack meanwhile).
func (r *StackReconciler) finishDriftCheck(ctx context.Context, s *pulumiv1.Stack) (busy, drifted bool, err error) {
	dc := s.Status.DriftCheck
	if dc == nil || dc.Update == "" {
		return false, false, nil
	}
	var u autov1alpha1.Update
	if err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: dc.Update}, &u); err != nil {
		if apierrors.IsNotFound(err) {
			dc.Update = ""
			return false, false, nil
		}
		return true, false, err
	}
	complete := apimeta.FindStatusCondition(u.Status.Conditions, autov1alpha1.UpdateConditionTypeComplete)
	if complete == nil || complete.Status != metav1.ConditionTrue {
		return true, false, nil
	}
	dc.Update = ""
	dc.LastCheckTime = u.Status.EndTime
	if dc.LastCheckTime.IsZero() {
		dc.LastCheckTime = metav1.NewTime(r.Now())
	}
	if complete.Reason != autov1alpha1.UpdateReasonSucceeded {
		r.Recorder.Event(s, corev1.EventTypeWarning, driftReasonCheckFailed, "drift check failed: "+u.Status.Message)
		return false, false, nil
	}
	dc.Changes = map[string]int64{}
	var parts []string
	var total int64
	for op, n := range u.Status.Changes {
		if op == "same" || n == 0 {
			continue
		}
		dc.Changes[op] = n
		total += n
		parts = append(parts, fmt.Sprintf("%s %d", op, n))
	}
	sort.Strings(parts)
	if total == 0 {
		apimeta.RemoveStatusCondition(&s.Status.Conditions, pulumiv1.DriftDetectedCondition)
		return false, false, nil
	}
	msg := fmt.Sprintf("%d resource(s) differ from the last successful update of %s (%s): %s; checked by %s", total, shortRev(dc.Revision), strings.Join(parts, ", "), resourceNames(u.Status.Resources, 10), u.Name)
	setCondition(&s.Status.Conditions, s.Generation, pulumiv1.DriftDetectedCondition, metav1.ConditionTrue, driftReasonDetected, msg)
	r.Recorder.Event(s, corev1.EventTypeWarning, driftReasonDetected, msg)
	log.FromContext(ctx).Info("Drift detected", "changes", dc.Changes)
	return false, true, nil
}

// reconcileDrift starts a drift check of an up-to-date Stack when one is due:
// a preview with refresh of the deployed revision, which changes nothing.
// started reports an Update created.
func (r *StackReconciler) reconcileDrift(ctx context.Context, s *pulumiv1.Stack, src stack.Source, ws *autov1alpha1.Workspace) (ctrl.Result, bool, error) {
	dd := s.Spec.DriftDetection
	lu := s.Status.LastUpdate
	if dd == nil || s.Spec.Preview || lu == nil || lu.Type != autov1alpha1.UpType || lu.State != pulumiv1.SucceededStackStateMessage {
		return ctrl.Result{}, false, nil
	}
	interval := DefaultDriftInterval
	if dd.IntervalSeconds > 0 {
		interval = time.Duration(dd.IntervalSeconds) * time.Second
	}
	if r.ResyncOverride > 0 {
		interval = r.ResyncOverride
	}
	last := lu.LastResyncTime.Time
	if dc := s.Status.DriftCheck; dc != nil && dc.LastCheckTime.After(last) {
		last = dc.LastCheckTime.Time
	}
	if wait := last.Add(interval).Sub(r.Now()); wait > 0 {
		// Waiting for the next drift check.
		return ctrl.Result{RequeueAfter: wait}, false, nil
	}
	ready, err := r.reconcileWorkspace(ctx, s, ws)
	if err != nil || !ready {
		return ctrl.Result{RequeueAfter: 5 * time.Second}, false, err
	}
	u, err := stack.Update(s, autov1alpha1.PreviewType, src.Revision, "Stackflow: drift check")
	if err != nil {
		return ctrl.Result{}, false, err
	}
	u.Name = fmt.Sprintf("%s-drift-%d", s.Name, r.Now().Unix())
	refresh := true
	u.Spec.Refresh = &refresh
	u.Spec.Target, u.Spec.TargetDependents = s.Spec.Targets, nil
	if err := controllerutil.SetControllerReference(s, u, r.Scheme()); err != nil {
		return ctrl.Result{}, false, err
	}
	if err := r.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, false, fmt.Errorf("create drift check: %w", err)
	}
	if s.Status.DriftCheck == nil {
		s.Status.DriftCheck = &pulumiv1.DriftCheck{}
	}
	s.Status.DriftCheck.Update, s.Status.DriftCheck.Revision = u.Name, src.Revision
	log.FromContext(ctx).Info("Started drift check", "update", u.Name)
	return ctrl.Result{}, true, nil
}

// resourceNames shortens "<op> <urn>" entries to "<op> <type>::<name>", at most
// max of them.
func resourceNames(resources []string, max int) string {
	var out []string
	for i, r := range resources {
		if i == max {
			out = append(out, fmt.Sprintf("and %d more", len(resources)-max))
			break
		}
		op, urn, _ := strings.Cut(r, " ")
		parts := strings.Split(urn, "::")
		if len(parts) >= 2 {
			urn = parts[len(parts)-2] + "::" + parts[len(parts)-1]
		}
		out = append(out, op+" "+urn)
	}
	if len(out) == 0 {
		return "resources not reported"
	}
	return strings.Join(out, ", ")
}
