package operator

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/stackflow-io/stackflow/internal/httperror"
	"github.com/stackflow-io/stackflow/internal/kubeauth"
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
	return addEndpointServerTLS(mgr, name, addr, h, nil)
}

// addEndpointServerTLS is addEndpointServer serving TLS when tlsConfig is set.
func addEndpointServerTLS(mgr ctrl.Manager, name, addr string, h http.Handler, tlsConfig *tls.Config) (string, error) {
	if addr == "" || addr == "0" {
		return "", nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("%s server: %w", name, err)
	}
	bound := l.Addr().String()
	if tlsConfig != nil {
		l = tls.NewListener(l, tlsConfig)
	}
	shutdown := endpointShutdownTimeout
	if err := mgr.Add(&manager.Server{Name: name, Server: newEndpointServer(h), Listener: l, ShutdownTimeout: &shutdown}); err != nil {
		l.Close()
		return "", fmt.Errorf("add %s server: %w", name, err)
	}
	return bound, nil
}

// AddProbeServer serves /healthz (the process answers) and /readyz (every
// check passes; /readyz?verbose lists them, /readyz/<name> runs one) on
// addr. Disable the manager's own (HealthProbeBindAddress "") when using it.
func AddProbeServer(mgr ctrl.Manager, addr string, ready map[string]healthz.Checker) (string, error) {
	return addEndpointServer(mgr, "health probe", addr, probeHandler(ready, mgr.GetLogger().WithName("probes")))
}

// probeHandler serves the probes. controller-runtime's handler withholds a
// failed check's error on /readyz but answers it on /readyz/<name>, to
// anyone who can reach the port: a failed check is answered here with
// internal/httperror instead (500 NotReady naming the check, a request ID),
// its error logged.
func probeHandler(ready map[string]healthz.Checker, log logr.Logger) http.Handler {
	mux := http.NewServeMux()
	readyz := &healthz.Handler{Checks: ready}
	healthzH := &healthz.Handler{Checks: map[string]healthz.Checker{"ping": healthz.Ping}}
	mux.Handle("/readyz", http.StripPrefix("/readyz", readyz))
	mux.Handle("/readyz/", http.StripPrefix("/readyz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(path.Clean(r.URL.Path), "/")
		check, ok := ready[name]
		if !ok {
			readyz.ServeHTTP(w, r) // /readyz/ itself, or 404
			return
		}
		if err := check(r); err != nil {
			httperror.Error(w, r, log, &notReady{check: name, err: err})
			return
		}
		_, _ = io.WriteString(w, "ok")
	})))
	mux.Handle("/healthz", http.StripPrefix("/healthz", healthzH))
	mux.Handle("/healthz/", http.StripPrefix("/healthz", healthzH))
	return mux
}

// notReady is a failed readiness check: answered 500 NotReady with the
// check's name, its error logged.
type notReady struct {
	check string
	err   error
}

func (e *notReady) Error() string   { return "readiness check " + e.check + ": " + e.err.Error() }
func (e *notReady) Unwrap() error   { return e.err }
func (e *notReady) HTTPStatus() int { return http.StatusInternalServerError }
func (e *notReady) Reason() string  { return "NotReady" }
func (e *notReady) Message() string { return "readiness check " + e.check + " failed" }

// Metrics authentication modes.
const (
	// MetricsAuthKube serves /metrics over HTTPS to callers whose bearer
	// token passes a TokenReview and whose SubjectAccessReview allows get on
	// the non-resource URL /metrics (ClusterRole stackflow-metrics-reader).
	MetricsAuthKube = "kube"
	// MetricsAuthNone serves /metrics over plain HTTP to anyone.
	MetricsAuthNone = "none"
)

// MetricsOptions configure the metrics server.
type MetricsOptions struct {
	// Addr is the listen address; "" or "0" serves nothing.
	Addr string
	// Auth is MetricsAuthKube (default) or MetricsAuthNone.
	Auth string
	// CertDir holds tls.crt and tls.key (reloaded when they change); empty
	// serves HTTPS with a self-signed certificate made at start.
	CertDir string
}

// AddMetricsServer serves controller-runtime's registry (which holds the
// stackflow_ metrics) at /metrics on o.Addr; with MetricsAuthKube, over TLS
// and only to authorized callers, as kubebuilder projects do. Disable the
// manager's own (Metrics.BindAddress "0") when using it.
func AddMetricsServer(mgr ctrl.Manager, o MetricsOptions) (string, error) {
	var h http.Handler = promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
	mux := http.NewServeMux()
	var tlsConfig *tls.Config
	switch o.Auth {
	case "", MetricsAuthKube:
		cs, err := kubernetes.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
		if err != nil {
			return "", fmt.Errorf("metrics authentication: %w", err)
		}
		h = requireAccess(kubeauth.New(kubeauth.Options{Client: cs, GrantHint: "bind the ClusterRole stackflow-metrics-reader"}), "/metrics",
			mgr.GetLogger().WithName("metrics"), h)
		if tlsConfig, err = metricsTLS(mgr, o.CertDir); err != nil {
			return "", err
		}
	case MetricsAuthNone:
	default:
		return "", fmt.Errorf("metrics auth %q: use %s or %s", o.Auth, MetricsAuthKube, MetricsAuthNone)
	}
	mux.Handle("/metrics", h)
	return addEndpointServerTLS(mgr, "metrics", o.Addr, mux, tlsConfig)
}

// requireAccess serves next only to callers whose bearer token is allowed
// get on the non-resource path (TokenReview, SubjectAccessReview; answers
// cached briefly); others get 401 or 403 with the reason and what to grant,
// or 503 in fixed words with a request ID, client-go's error logged under it
// (internal/httperror).
func requireAccess(az *kubeauth.Authorizer, path string, log logr.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := az.Check(r, kubeauth.PathTarget(path)); err != nil {
			httperror.Error(w, r, log, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// metricsTLS serves the certificate in certDir (watched for renewals), or a
// self-signed one made now (a scraper then skips verification, as with
// kubebuilder's default).
func metricsTLS(mgr ctrl.Manager, certDir string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if certDir != "" {
		w, err := certwatcher.New(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
		if err != nil {
			return nil, fmt.Errorf("metrics certificate in %s: %w", certDir, err)
		}
		if err := mgr.Add(w); err != nil {
			return nil, err
		}
		cfg.GetCertificate = w.GetCertificate
		return cfg, nil
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("stackflow-operator-metrics", nil, nil)
	if err != nil {
		return nil, fmt.Errorf("self-signed metrics certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	cfg.Certificates = []tls.Certificate{cert}
	return cfg, nil
}
