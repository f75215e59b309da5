// Package operatortest runs the operator inside a test process, against a
// control plane of test/framework/substrate, as net/http/httptest runs a
// server. It is part of the test harness but lives beside the operator
// assembly (operator/internal/operator) because it imports it, and Go lets
// only code under operator/ import operator/internal; it is apart from
// substrate because the assembly imports packages whose own tests use
// substrate. It is linked into no binary of the product: the suites under
// operator/test and the developer tools (operator/devtools) use it.
package operatortest

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/stackflow-io/stackflow/operator/internal/operator"
)

// StartOperator runs the operator in this process against the control plane
// of cfg, with opts, until stop or the test's end (whichever comes first).
// Controller names may repeat: tests start several operators in one process.
func StartOperator(t testing.TB, cfg *rest.Config, opts operator.Options) (op *operator.Operator, stop func()) {
	t.Helper()
	return StartOperatorLogging(t, cfg, opts, ctrl.Log)
}

// StartOperatorLogging is StartOperator with the operator's log going to
// log (e.g. zap.New(zap.WriteTo(w))) instead of the process's.
func StartOperatorLogging(t testing.TB, cfg *rest.Config, opts operator.Options, log logr.Logger) (op *operator.Operator, stop func()) {
	t.Helper()
	skip := true
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Logger: log,
		Scheme: operator.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:      operator.CacheOptionsFor(opts),
		Controller: config.Controller{SkipNameValidation: &skip},
		// As the operator binary's (see operator.EventBroadcaster).
		EventBroadcaster: operator.EventBroadcaster(), //nolint:staticcheck
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	op, err = operator.Setup(mgr, opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once bool
	stop = func() {
		if once {
			return
		}
		once = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
		op.Close()
	}
	t.Cleanup(stop)
	return op, stop
}
