package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
)

// Per-step tests of the Stack reconciler against the controller-runtime fake
// client (status subresource, resourceVersions, optimistic locking), through
// an interceptor that makes writes fail the way a busy API server does: the
// events and metrics of a transition are sent once its status is stored,
// whatever the reconciles that lost a write race, read a stale copy or
// retried after an error did before.

var stepsNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

const stepsCommit = "5f3c2a1b9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a"

// stackStepEnv is one Stack step test's API server (faults injected through
// funcs) and event recorder.
type stackStepEnv struct {
	c      client.Client
	events *record.FakeRecorder
	r      *StackReconciler
}

func newStackStepEnv(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) *stackStepEnv {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, autov1alpha1.AddToScheme, pulumiv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithStatusSubresource(&pulumiv1.Stack{}, &autov1alpha1.Workspace{}, &autov1alpha1.Update{}).
		WithObjects(objs...).WithInterceptorFuncs(funcs).Build()
	e := &stackStepEnv{c: c, events: record.NewFakeRecorder(100)}
	e.r = &StackReconciler{Client: c, APIReader: c, Recorder: e.events, Now: func() time.Time { return stepsNow }, DigestKey: []byte("test-key")}
	return e
}

// reconcile runs one Reconcile of the Stack app, which must not return an
// error unless wantErr.
func (e *stackStepEnv) reconcile(t *testing.T, step string, wantErr bool) ctrl.Result {
	t.Helper()
	res, err := e.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: "app"}})
	if (err != nil) != wantErr {
		t.Fatalf("%s: Reconcile = %v, want an error: %v", step, err, wantErr)
	}
	return res
}

// stored is the Stack app as stored.
func (e *stackStepEnv) stored(t *testing.T) *pulumiv1.Stack {
	t.Helper()
	var s pulumiv1.Stack
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "app"}, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// failOnce fails the first call that match selects with err, passing every
// other call to the client.
type failOnce struct {
	err  error
	done bool
}

func (f *failOnce) fail(match bool) error {
	if !match || f.done {
		return nil
	}
	f.done = true
	return f.err
}

func conflictErr(resource string) error {
	return apierrors.NewConflict(schema.GroupResource{Group: "pulumi.com", Resource: resource}, "app",
		errors.New("the object has been modified; please apply your changes to the latest version and try again"))
}

// stackStatusConflictsOnce makes the first status patch of a Stack lose a
// write race.
func stackStatusConflictsOnce() interceptor.Funcs {
	once := &failOnce{err: conflictErr("stacks")}
	return interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
		_, isStack := obj.(*pulumiv1.Stack)
		if err := once.fail(isStack && sub == "status"); err != nil {
			return err
		}
		return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
	}}
}

// driftCheckStack is an up-to-date Stack at a pinned commit whose drift
// check, Update app-2, has ended for reason, with msg and changes.
func driftCheckStack(t *testing.T, reason, msg string, changes map[string]int64) (*pulumiv1.Stack, *autov1alpha1.Update) {
	t.Helper()
	s := &pulumiv1.Stack{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", Generation: 1, UID: "stack-uid", Finalizers: []string{StackFinalizer}},
		Spec: pulumiv1.StackSpec{Stack: "dev", GitSource: &pulumiv1.GitSource{ProjectRepo: "https://git.example.com/acme/app.git", Commit: stepsCommit},
			DriftDetection: &pulumiv1.DriftDetection{}},
	}
	s.Status.LastUpdate = &pulumiv1.StackUpdateState{Generation: 1, Name: "app-1", Type: autov1alpha1.UpType, State: pulumiv1.SucceededStackStateMessage,
		LastAttemptedCommit: stepsCommit, LastSuccessfulCommit: stepsCommit, LastResyncTime: metav1.NewTime(stepsNow.Add(-10 * time.Minute)), Message: "update succeeded"}
	markStackReady(s)
	u, err := stack.Update(s, stack.Plan{Number: 2, Type: autov1alpha1.PreviewType, Purpose: pulumiv1.UpdatePurposeDriftCheck, Refresh: true, Revision: stepsCommit, Message: "Stackflow: drift check"})
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
	u.Status.Message, u.Status.Changes = msg, changes
	u.Status.Resources = []string{"update urn:pulumi:dev::app::aws:s3/bucket:Bucket::logs"}
	u.Status.StartTime, u.Status.EndTime = metav1.NewTime(stepsNow.Add(-time.Minute)), metav1.NewTime(stepsNow.Add(-time.Second))
	markEnded(u, reason, reason != autov1alpha1.UpdateReasonSucceeded, u.Status.Message)
	return s, u
}

// eventsWith are the events among evs whose reason is reason.
func eventsWith(evs []string, reason string) []string {
	var out []string
	for _, ev := range evs {
		if _, rest, _ := strings.Cut(ev, " "); strings.HasPrefix(rest, reason+" ") {
			out = append(out, ev)
		}
	}
	return out
}

// TestDriftCheckReportedOnceStored: a drift check's result is reported once,
// by the reconcile whose status write stored it. The first reconcile records
// the check and loses its write race; its retry stores it; a reconcile from
// a stale copy (the cache behind that write) records it again and is
// refused by the lock; a fresh one finds it recorded. Exactly one
// DriftDetected (or DriftCheckFailed) event, with the stored message.
func TestDriftCheckReportedOnceStored(t *testing.T) {
	for _, tc := range []struct {
		name, reason, msg, event string
		changes                  map[string]int64
		message                  string
	}{
		{"drift found", autov1alpha1.UpdateReasonSucceeded, "update succeeded", pulumiv1.EventReasonDriftDetected, map[string]int64{"update": 1, "same": 3},
			"Warning DriftDetected 1 resource(s) differ from the last successful update of 5f3c2a1 (update 1): update aws:s3/bucket:Bucket::logs; checked by app-2"},
		{"check failed", autov1alpha1.UpdateReasonFailed, "refresh failed: AccessDenied", pulumiv1.EventReasonDriftCheckFailed, nil,
			"Warning DriftCheckFailed drift check failed: refresh failed: AccessDenied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, u := driftCheckStack(t, tc.reason, tc.msg, tc.changes)
			var stale *pulumiv1.Stack
			funcs := stackStatusConflictsOnce()
			funcs.Get = func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if st, ok := obj.(*pulumiv1.Stack); ok && stale != nil {
					stale.DeepCopyInto(st)
					stale = nil
					return nil
				}
				return c.Get(ctx, key, obj, opts...)
			}
			e := newStackStepEnv(t, funcs, s, u)
			before := e.stored(t)

			// Records the check; the write loses a race: nothing reported,
			// requeued quietly.
			if res := e.reconcile(t, "lost race", false); res.RequeueAfter != conflictRetry {
				t.Fatalf("lost race: requeue %s, want %s", res.RequeueAfter, conflictRetry)
			}
			if ev := e.drainEvents(); len(ev) != 0 {
				t.Fatalf("events from a reconcile whose status was not stored: %q", ev)
			}

			// The retry stores it and reports it once.
			e.reconcile(t, "retry", false)
			got := e.stored(t)
			if dc := got.Status.DriftCheck; dc == nil || dc.Update != "app-2" || got.Status.CurrentUpdate != nil {
				t.Fatalf("the check is not recorded: %+v, current %+v", got.Status.DriftCheck, got.Status.CurrentUpdate)
			}
			ev := e.drainEvents()
			if len(ev) != 1 || ev[0] != tc.message {
				t.Fatalf("events = %q, want exactly %q", ev, tc.message)
			}

			// A reconcile of the copy read before the check was stored
			// records it again; the lock refuses its write.
			stale = before
			conflicts := testutil.ToFloat64(reconcileOutcomes.WithLabelValues("stack", "conflict"))
			if res := e.reconcile(t, "stale copy", false); res.RequeueAfter != conflictRetry {
				t.Fatalf("stale copy: requeue %s, want %s (the lock must refuse the write)", res.RequeueAfter, conflictRetry)
			}
			if got := testutil.ToFloat64(reconcileOutcomes.WithLabelValues("stack", "conflict")); got != conflicts+1 {
				t.Fatalf("stale copy: the write was not refused by the lock (conflicts %v -> %v)", conflicts, got)
			}
			// And a fresh one finds the check recorded.
			e.reconcile(t, "again", false)
			if ev := e.drainEvents(); len(eventsWith(ev, tc.event)) != 0 {
				t.Fatalf("the check was reported again: %q", ev)
			}
		})
	}
}

func (e *stackStepEnv) drainEvents() []string { return recordedEvents(e.events) }

// TestDestroySkippedReportedOnce: deleting a preview Stack with
// destroyOnFinalize says once, in its status and one DestroySkipped event,
// that nothing is destroyed — whatever the deletion's retries: its first
// status write loses a race, its Workspace's deletion fails once, its
// finalizer's removal loses a race.
func TestDestroySkippedReportedOnce(t *testing.T) {
	s, _ := driftCheckStack(t, autov1alpha1.UpdateReasonSucceeded, "update succeeded", nil)
	s.Status.CurrentUpdate, s.Spec.DriftDetection = nil, nil
	s.Spec.Preview, s.Spec.DestroyOnFinalize = true, true
	now := metav1.NewTime(stepsNow)
	s.DeletionTimestamp = &now
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app"}}
	funcs := stackStatusConflictsOnce()
	wsDelete := &failOnce{err: apierrors.NewServiceUnavailable("etcd leader changed")}
	funcs.Delete = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
		_, isWorkspace := obj.(*autov1alpha1.Workspace)
		if err := wsDelete.fail(isWorkspace); err != nil {
			return err
		}
		return c.Delete(ctx, obj, opts...)
	}
	finalizer := &failOnce{err: conflictErr("stacks")}
	funcs.Update = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
		_, isStack := obj.(*pulumiv1.Stack)
		if err := finalizer.fail(isStack); err != nil {
			return err
		}
		return c.Update(ctx, obj, opts...)
	}
	e := newStackStepEnv(t, funcs, s, ws)

	var all []string
	gone, said := false, false
	for i := 0; i < 10 && !gone; i++ {
		_, err := e.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(s)})
		if err != nil && !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("reconcile %d: %v", i, err)
		}
		all = append(all, e.drainEvents()...)
		var got pulumiv1.Stack
		switch err := e.c.Get(context.Background(), client.ObjectKeyFromObject(s), &got); {
		case apierrors.IsNotFound(err):
			gone = true
		case err != nil:
			t.Fatal(err)
		default:
			if c := apimeta.FindStatusCondition(got.Status.Conditions, pulumiv1.ReconcilingCondition); c != nil {
				if c.Reason != pulumiv1.EventReasonDestroySkipped {
					t.Fatalf("reconcile %d: Reconciling %s while the preview Stack goes", i, c.Reason)
				}
				said = true
			}
		}
	}
	skipped := eventsWith(all, pulumiv1.EventReasonDestroySkipped)
	if len(skipped) != 1 || !strings.HasPrefix(skipped[0], "Normal DestroySkipped spec.preview is on: deleted without destroying Pulumi stack dev") {
		t.Fatalf("DestroySkipped events = %q (all: %q), want one", skipped, all)
	}
	if !gone || !said || !wsDelete.done || !finalizer.done {
		t.Fatalf("gone %v, said in the status %v, workspace deletion failed %v, finalizer update conflicted %v", gone, said, wsDelete.done, finalizer.done)
	}
}

// TestOutcomeMetricCountsTheStoredOutcome: a reconcile whose status write
// fails is counted as what became of it — transient (the error returned),
// conflict (requeued) or gone — never as the outcome it did not store.
func TestOutcomeMetricCountsTheStoredOutcome(t *testing.T) {
	for _, tc := range []struct {
		name     string
		patchErr error
		outcome  error
		want     string
		wantErr  bool
	}{
		{"up to date, the write fails", apierrors.NewServiceUnavailable("etcd leader changed"), errUpToDate, "transient", true},
		{"stalled, the write fails", apierrors.NewInternalError(errors.New("boom")), &stallingError{reason: pulumiv1.StalledSpecInvalidReason, msg: "bad"}, "transient", true},
		{"up to date, the write loses a race", conflictErr("stacks"), errUpToDate, "conflict", false},
		{"up to date, the Stack went meanwhile", apierrors.NewNotFound(schema.GroupResource{Group: "pulumi.com", Resource: "stacks"}, "app"), errUpToDate, "gone", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := driftCheckStack(t, autov1alpha1.UpdateReasonSucceeded, "update succeeded", nil)
			s.Status = pulumiv1.StackStatus{}
			patchErr := tc.patchErr
			e := newStackStepEnv(t, interceptor.Funcs{SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
				return patchErr
			}}, s)
			base := e.stored(t)
			obj := base.DeepCopy()
			counts := map[string]float64{}
			for _, l := range []string{"ready", "stalled", "transient", "conflict", "gone"} {
				counts[l] = testutil.ToFloat64(reconcileOutcomes.WithLabelValues("stack", l))
			}
			_, err := e.r.finisher().finish(context.Background(), base, obj, tc.outcome)
			if (err != nil) != tc.wantErr {
				t.Fatalf("finish = %v, want an error: %v", err, tc.wantErr)
			}
			for l, n := range counts {
				want := n
				if l == tc.want {
					want++
				}
				if got := testutil.ToFloat64(reconcileOutcomes.WithLabelValues("stack", l)); got != want {
					t.Errorf("stackflow_reconcile_outcomes_total{stack,%s} went from %v to %v, want %v", l, n, got, want)
				}
			}
			if ev := e.drainEvents(); len(ev) != 0 {
				t.Fatalf("events from a status that was not stored: %q", ev)
			}
		})
	}
}
