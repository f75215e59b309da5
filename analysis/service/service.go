package service

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"

	"github.com/stackflow-io/stackflow/analysis/server"
	"github.com/stackflow-io/stackflow/analysis/stackcache"
	"github.com/stackflow-io/stackflow/analysis/verification"
)

// Auth modes.
const (
	AuthKube = "kube"
	AuthNone = "none"
)

// DefaultAudience is the token audience the service accepts unless
// --audiences says otherwise: a caller presents a ServiceAccount token minted
// for it (a projected token volume, or the TokenRequest API), never the token
// it uses with the API server.
const DefaultAudience = "stackflow-analysis"

// Options configures the service; BindFlags binds them to flags.
type Options struct {
	// BindAddress is the listen address of the API, health and metrics.
	BindAddress string
	// Auth is "kube" (TokenReview and SubjectAccessReview) or "none".
	Auth string
	// AuthCacheTTL is how long an authentication or authorisation answer
	// is reused.
	AuthCacheTTL time.Duration
	// Audiences are the token audiences accepted with --auth=kube: the
	// TokenReview is asked for them and a token is accepted only if the API
	// server says it is meant for one. Empty means DefaultAudience.
	Audiences []string
	// TLSCertFile and TLSKeyFile serve HTTPS, reloaded when they change.
	TLSCertFile, TLSKeyFile string
	// WatchNamespaces limits the cache; empty watches all.
	WatchNamespaces []string
	// PulumiCloudTokenSecret is <namespace>/<name> of a Secret whose
	// accessToken key holds a Pulumi access token; empty disables the
	// Pulumi Cloud routes.
	PulumiCloudTokenSecret string
	// PulumiCloudURL is the Pulumi Cloud API.
	PulumiCloudURL string
	// PulumiCloudCacheTTL is how long a Pulumi Cloud answer is reused.
	PulumiCloudCacheTTL time.Duration
	// PulumiCloudTimeout bounds each request to the Pulumi Cloud API.
	PulumiCloudTimeout time.Duration

	// Config reaches the cluster.
	Config *rest.Config
	// Log is the logger.
	Log logr.Logger
	// Listener, when set, is used instead of listening on BindAddress
	// (tests).
	Listener net.Listener
	// Registry, when set, receives the metrics (default: a new registry
	// with the Go and process collectors).
	Registry *prometheus.Registry
	// Ready, when set, is closed once the server listens and the cache has
	// synced.
	Ready chan<- struct{}
}

// BindFlags binds the options to command-line flags.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.BindAddress, "bind-address", ":8080", "listen address of the API, /healthz, /readyz and /metrics")
	fs.StringVar(&o.Auth, "auth", AuthKube, `how callers are checked: "kube" (Authorization: Bearer <token>, checked with a TokenReview for --audiences; access with a SubjectAccessReview of get on stacks.pulumi.com in the namespace, or get on the non-resource path for /v1/pulumi/…) or "none" (anyone may read; for local demos only)`)
	fs.DurationVar(&o.AuthCacheTTL, "auth-cache-ttl", 10*time.Second, "how long a TokenReview or SubjectAccessReview answer is reused")
	o.Audiences = []string{DefaultAudience}
	audiencesSet := false
	fs.Func("audiences", `comma-separated token audiences accepted with --auth=kube (default "`+DefaultAudience+`"): callers send a ServiceAccount token minted for one of them (a projected token volume with that audience), which the TokenReview checks; a token for the API server's own audience is refused unless it is listed`, func(s string) error {
		if !audiencesSet {
			o.Audiences, audiencesSet = nil, true
		}
		for _, a := range strings.Split(s, ",") {
			if a = strings.TrimSpace(a); a != "" {
				o.Audiences = append(o.Audiences, a)
			}
		}
		if len(o.Audiences) == 0 {
			return errors.New("give at least one audience")
		}
		return nil
	})
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", "", "PEM certificate to serve HTTPS with (reloaded when the file changes); plain HTTP when empty")
	fs.StringVar(&o.TLSKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fs.Func("watch-namespaces", "comma-separated namespaces whose Stacks are served (default: all)", func(s string) error {
		for _, ns := range strings.Split(s, ",") {
			if ns = strings.TrimSpace(ns); ns != "" {
				o.WatchNamespaces = append(o.WatchNamespaces, ns)
			}
		}
		return nil
	})
	fs.StringVar(&o.PulumiCloudTokenSecret, "pulumi-cloud-token-secret", "", "<namespace>/<name> of a Secret whose accessToken key holds a Pulumi access token: enables GET /v1/pulumi/{org}/{project}/{stack}/verification (off when empty)")
	fs.StringVar(&o.PulumiCloudURL, "pulumi-cloud-url", "https://api.pulumi.com", "Pulumi Cloud API URL (self-hosted Pulumi Cloud: its API URL)")
	fs.DurationVar(&o.PulumiCloudCacheTTL, "pulumi-cloud-cache-ttl", 10*time.Second, "how long an answer of the Pulumi Cloud API is reused for a stack")
	fs.DurationVar(&o.PulumiCloudTimeout, "pulumi-cloud-timeout", 10*time.Second, "the longest a request to the Pulumi Cloud API may take, from the connection to the last byte of its answer (at most 8 MiB): an API still answering then is reported Pending/CloudUnavailable")
}

// Validate checks the options before anything starts.
func (o *Options) Validate() error {
	switch o.Auth {
	case AuthKube, AuthNone:
	default:
		return fmt.Errorf("--auth=%q: use kube or none", o.Auth)
	}
	for _, a := range o.Audiences {
		if a == "" || strings.ContainsAny(a, ", \t\n") {
			return fmt.Errorf("--audiences: %q is not an audience", a)
		}
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		return errors.New("--tls-cert-file and --tls-key-file go together: give both or neither")
	}
	if o.PulumiCloudTokenSecret != "" {
		if ns, name, ok := strings.Cut(o.PulumiCloudTokenSecret, "/"); !ok || ns == "" || name == "" {
			return fmt.Errorf("--pulumi-cloud-token-secret=%q: use <namespace>/<name>", o.PulumiCloudTokenSecret)
		}
	}
	return nil
}

// audiences are the accepted token audiences: Audiences, or DefaultAudience.
func (o *Options) audiences() []string {
	if len(o.Audiences) == 0 {
		return []string{DefaultAudience}
	}
	return o.Audiences
}

// Server timeouts: a long poll holds a request up to verification.MaxWait.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = verification.MaxWait + 10*time.Second
	idleTimeout       = 90 * time.Second
	maxHeaderBytes    = 16 << 10
	shutdownTimeout   = verification.MaxWait + 5*time.Second
)

// Run serves until ctx ends.
func Run(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	log := o.Log
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}

	stacks, err := stackcache.New(o.Config, stackcache.Options{Namespaces: o.WatchNamespaces})
	if err != nil {
		return err
	}
	cacheDone, err := stacks.Start(ctx)
	if err != nil {
		return err
	}

	guard, err := newGuard(o, reg)
	if err != nil {
		return err
	}
	cloud, err := newCloud(ctx, o)
	if err != nil {
		return err
	}
	if cloud == nil {
		log.Info("Pulumi Cloud verification is off (no --pulumi-cloud-token-secret)")
	}
	h := server.New(server.Options{Stacks: stacks, Cloud: cloud, Guard: guard, Registerer: reg, Gatherer: reg, Log: log.WithName("http")})

	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          nil,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	ln := o.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", o.BindAddress); err != nil {
			return fmt.Errorf("listen on %s: %w", o.BindAddress, err)
		}
	}
	scheme := "http"
	if o.TLSCertFile != "" {
		cw, err := certwatcher.New(o.TLSCertFile, o.TLSKeyFile)
		if err != nil {
			return fmt.Errorf("load TLS certificate: %w", err)
		}
		go func() {
			if err := cw.Start(ctx); err != nil {
				log.Error(err, "Watching the TLS certificate failed")
			}
		}()
		ln = tls.NewListener(ln, &tls.Config{GetCertificate: cw.GetCertificate, MinVersion: tls.VersionTLS12})
		scheme = "https"
	} else {
		log.Info("Serving plain HTTP: give --tls-cert-file and --tls-key-file to serve HTTPS")
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln) }()
	if o.Auth == AuthKube {
		log.Info("Serving", "address", ln.Addr().String(), "scheme", scheme, "auth", o.Auth, "audiences", o.audiences())
	} else {
		log.Info("Serving", "address", ln.Addr().String(), "scheme", scheme, "auth", o.Auth)
	}

	go func() {
		if stacks.WaitForSync(ctx) {
			log.Info("Stack and Update caches synced")
			if o.Ready != nil {
				close(o.Ready)
			}
		}
	}()

	select {
	case <-ctx.Done():
	case err := <-serveDone:
		return fmt.Errorf("serve: %w", err)
	case err := <-cacheDone:
		if err != nil {
			return fmt.Errorf("informer cache: %w", err)
		}
	}
	sctx, scancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	return nil
}
