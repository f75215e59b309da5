package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// TestQuietConflicts: a lost optimistic-locking race, whichever step or
// write lost it, is requeued by the finisher without an error (controller-runtime logs every returned error as "Reconciler error"
// with a stack trace) and logged at debug level only; every other outcome
// passes through unchanged.
func TestQuietConflicts(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "pulumi.com", Resource: "stacks"}, "web-dev",
		errors.New("the object has been modified; please apply your changes to the latest version and try again"))
	other := errors.New("agent unreachable")
	for _, tc := range []struct {
		name       string
		result     ctrl.Result
		err        error
		wantResult ctrl.Result
		wantErr    error
		wantLog    bool
	}{
		{"a conflict", ctrl.Result{}, conflict, ctrl.Result{RequeueAfter: conflictRetry}, nil, true},
		{"a wrapped conflict (a step's error)", ctrl.Result{RequeueAfter: time.Minute}, fmt.Errorf("write status: %w", conflict), ctrl.Result{RequeueAfter: conflictRetry}, nil, true},
		{"another error", ctrl.Result{}, other, ctrl.Result{}, other, false},
		{"success", ctrl.Result{RequeueAfter: time.Minute}, nil, ctrl.Result{RequeueAfter: time.Minute}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs []string
			logger := funcr.New(func(prefix, args string) { logs = append(logs, prefix+" "+args) }, funcr.Options{Verbosity: 1, LogInfoLevel: ptr.To("v")})
			ctx := log.IntoContext(context.Background(), logger)
			got, err := quiet(ctx, tc.result, tc.err)
			if got != tc.wantResult || !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("Reconcile = %+v, %v; want %+v, %v", got, err, tc.wantResult, tc.wantErr)
			}
			if !tc.wantLog {
				if len(logs) != 0 {
					t.Fatalf("logged %q", logs)
				}
				return
			}
			if len(logs) != 1 || !strings.Contains(logs[0], `"v"=1`) || !strings.Contains(logs[0], "Lost a write race") {
				t.Fatalf("want one debug-level (V(1)) line about the lost race, got %q", logs)
			}
		})
	}
}
