package operator

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Timeouts of the metrics and probe servers (controller-runtime's own set no
// read or write timeout). Their requests are small GETs.
const (
	endpointReadHeaderTimeout = 10 * time.Second
	endpointReadTimeout       = 30 * time.Second
	endpointWriteTimeout      = 30 * time.Second
	endpointIdleTimeout       = 90 * time.Second
	endpointShutdownTimeout   = 10 * time.Second
)

// newEndpointServer is an HTTP server for h with the timeouts above.
func newEndpointServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: endpointReadHeaderTimeout,
		ReadTimeout:       endpointReadTimeout,
		WriteTimeout:      endpointWriteTimeout,
		IdleTimeout:       endpointIdleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
}

// addEndpointServer binds addr now (a busy port fails at start, ":0" gets its
// port) and runs a server for h on every replica, leader or not, from the
// manager's start, before the caches sync. It returns the bound address; ""
// or "0" serves nothing.
func addEndpointServer(mgr ctrl.Manager, name, addr string, h http.Handler) (string, error) {
	if addr == "" || addr == "0" {
		return "", nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("%s server: %w", name, err)
	}
	shutdown := endpointShutdownTimeout
	if err := mgr.Add(&manager.Server{Name: name, Server: newEndpointServer(h), Listener: l, ShutdownTimeout: &shutdown}); err != nil {
		l.Close()
		return "", fmt.Errorf("add %s server: %w", name, err)
	}
	return l.Addr().String(), nil
}

// AddProbeServer serves /healthz (the process answers) and /readyz (every
// check passes; /readyz?verbose lists them, /readyz/<name> runs one) on
// addr. Disable the manager's own (HealthProbeBindAddress "") when using it.
func AddProbeServer(mgr ctrl.Manager, addr string, ready map[string]healthz.Checker) (string, error) {
	mux := http.NewServeMux()
	readyz := &healthz.Handler{Checks: ready}
	healthzH := &healthz.Handler{Checks: map[string]healthz.Checker{"ping": healthz.Ping}}
	mux.Handle("/readyz", http.StripPrefix("/readyz", readyz))
	mux.Handle("/readyz/", http.StripPrefix("/readyz", readyz))
	mux.Handle("/healthz", http.StripPrefix("/healthz", healthzH))
	mux.Handle("/healthz/", http.StripPrefix("/healthz", healthzH))
	return addEndpointServer(mgr, "health probe", addr, mux)
}

// AddMetricsServer serves controller-runtime's registry (which holds the
// stackflow_ metrics) at /metrics on addr. Disable the manager's own
// (Metrics.BindAddress "0") when using it.
func AddMetricsServer(mgr ctrl.Manager, addr string) (string, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	return addEndpointServer(mgr, "metrics", addr, mux)
}
