package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/stackflow-io/stackflow/analysis/verification"
	"github.com/stackflow-io/stackflow/internal/httperror"
	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// StackSource serves Stacks and Updates (from an informer cache: no API call
// per request).
type StackSource interface {
	// Stack returns the Stack, nil when it does not exist.
	Stack(ctx context.Context, key types.NamespacedName) (*pulumiv1.Stack, error)
	// Update returns the Update, nil when it does not exist.
	Update(ctx context.Context, key types.NamespacedName) *autov1alpha1.Update
	// Watch returns a channel closed when the Stack or one of its Updates
	// next changes, and the function to call once the caller stops waiting
	// on it (the source may then forget the key).
	Watch(key types.NamespacedName) (<-chan struct{}, func())
	// Synced reports whether the cache has listed everything.
	Synced() bool
}

// Cloud answers verifications of Pulumi Cloud stacks.
type Cloud interface {
	Verify(ctx context.Context, org, project, stack string, q verification.Query) verification.Result
	// ValidName reports whether s is a valid organization, project or stack
	// name.
	ValidName(s string) bool
	// PollInterval is how often a long poll asks again.
	PollInterval() time.Duration
}

// Guard decides whether the caller of r may read a Stack, or a non-resource
// path. An error that says its own answer (an httperror.Answerer, as
// kubeauth's errors do) is answered with its status, reason and message; one
// that has only an HTTPStatus method with that status (401, 403, 503) and,
// below 500, its text; any other error with 500 InternalError. A 5xx answer
// never carries the error's text: it has a fixed message and a request ID,
// the error goes to the log under that ID (httperror.Error).
type Guard interface {
	Stack(r *http.Request, namespace, name string) error
	Path(r *http.Request, path string) error
}

// Options configures the handler.
type Options struct {
	Stacks StackSource
	// Cloud serves /v1/pulumi/…; nil answers those routes 404 with a
	// message saying how to enable them.
	Cloud Cloud
	Guard Guard
	// Registerer receives the metrics; /metrics serves Gatherer.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	Now        func() time.Time
	Log        logr.Logger
}

// Server is the HTTP API.
type Server struct {
	o       Options
	mux     *http.ServeMux
	metrics *metrics
}

// MaxRequestBytes caps a request's body: the API takes none.
const MaxRequestBytes = 4 << 10

// New builds the handler.
func New(o Options) *Server {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Registerer == nil {
		reg := prometheus.NewRegistry()
		o.Registerer, o.Gatherer = reg, reg
	}
	s := &Server{o: o, mux: http.NewServeMux(), metrics: newMetrics(o.Registerer)}
	s.mux.HandleFunc("GET /v1/namespaces/{namespace}/stacks/{name}/verification", s.instrument("verification", s.verification))
	s.mux.HandleFunc("GET /v1/namespaces/{namespace}/stacks/{name}", s.instrument("stack", s.summary))
	s.mux.HandleFunc("GET /v1/pulumi/{org}/{project}/{stack}/verification", s.instrument("pulumi-verification", s.cloudVerification))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("/", s.instrument("other", func(w http.ResponseWriter, r *http.Request) (verification.Phase, int) {
		return "", s.fail(w, r, http.StatusNotFound, httperror.NotFound, "no such route: use GET /v1/namespaces/{namespace}/stacks/{name}/verification?commit=<sha>&operation=up|preview (see analysis/README.md)")
	}))
	return s
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > MaxRequestBytes {
		s.fail(w, r, http.StatusRequestEntityTooLarge, httperror.RequestTooLarge, "the API takes no request body")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBytes)
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET")
		s.fail(w, r, http.StatusMethodNotAllowed, httperror.MethodNotAllowed, fmt.Sprintf("method %s is not allowed: the API is read-only, use GET", r.Method))
		return
	}
	s.mux.ServeHTTP(w, r)
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if s.o.Stacks != nil && !s.o.Stacks.Synced() {
		httperror.Write(w, http.StatusServiceUnavailable, httperror.ServiceUnavailable, "the Stack and Update caches have not synced yet")
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

type handlerFunc func(w http.ResponseWriter, r *http.Request) (verification.Phase, int)

func (s *Server) instrument(route string, h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		phase, code := h(w, r)
		s.metrics.requests.WithLabelValues(string(phase), strconv.Itoa(code)).Inc()
		s.metrics.latency.WithLabelValues(route).Observe(time.Since(start).Seconds())
	}
}

func (s *Server) verification(w http.ResponseWriter, r *http.Request) (verification.Phase, int) {
	key, ok := s.stackKey(w, r)
	if !ok {
		return "", http.StatusBadRequest
	}
	q, err := verification.ParseQuery(r.URL.Query())
	if err != nil {
		return "", s.fail(w, r, http.StatusBadRequest, httperror.BadRequest, err.Error())
	}
	if code := s.guard(w, r, s.o.Guard.Stack(r, key.Namespace, key.Name)); code != 0 {
		return "", code
	}
	compute := func() verification.Result {
		return verification.Verify(s.input(r.Context(), key, q))
	}
	res := s.longPoll(r.Context(), q.Wait, compute, func() (<-chan struct{}, func()) { return s.o.Stacks.Watch(key) })
	return res.Phase, s.reply(w, res)
}

func (s *Server) summary(w http.ResponseWriter, r *http.Request) (verification.Phase, int) {
	key, ok := s.stackKey(w, r)
	if !ok {
		return "", http.StatusBadRequest
	}
	if len(r.URL.Query()) > 0 {
		return "", s.fail(w, r, http.StatusBadRequest, httperror.BadRequest, "this route takes no query parameters; to verify a commit use …/verification?commit=<sha>")
	}
	if code := s.guard(w, r, s.o.Guard.Stack(r, key.Namespace, key.Name)); code != 0 {
		return "", code
	}
	res := verification.Summary(s.input(r.Context(), key, verification.Query{}))
	return res.Phase, s.reply(w, res)
}

func (s *Server) cloudVerification(w http.ResponseWriter, r *http.Request) (verification.Phase, int) {
	if s.o.Cloud == nil {
		return "", s.fail(w, r, http.StatusNotFound, httperror.NotFound, "Pulumi Cloud verification is off: start stackflow-analysis with --pulumi-cloud-token-secret=<namespace>/<name>")
	}
	org, project, stack := r.PathValue("org"), r.PathValue("project"), r.PathValue("stack")
	for _, n := range []string{org, project, stack} {
		if !s.o.Cloud.ValidName(n) {
			return "", s.fail(w, r, http.StatusBadRequest, httperror.BadRequest, fmt.Sprintf("%q is not a valid Pulumi organization, project or stack name", truncate(n, 100)))
		}
	}
	q, err := verification.ParseQuery(r.URL.Query())
	if err != nil {
		return "", s.fail(w, r, http.StatusBadRequest, httperror.BadRequest, err.Error())
	}
	if code := s.guard(w, r, s.o.Guard.Path(r, r.URL.Path)); code != 0 {
		return "", code
	}
	compute := func() verification.Result { return s.o.Cloud.Verify(r.Context(), org, project, stack, q) }
	tick := func() (<-chan struct{}, func()) {
		ch := make(chan struct{})
		t := time.AfterFunc(s.o.Cloud.PollInterval(), func() { close(ch) })
		return ch, func() { t.Stop() }
	}
	res := s.longPoll(r.Context(), q.Wait, compute, tick)
	return res.Phase, s.reply(w, res)
}

// longPoll computes the answer; with wait, it holds the request until the
// phase differs from the first answer's or wait has passed. watch returns a
// channel closed at the next change and the function that ends the watch; it
// is taken before each computation so no change between the two is missed,
// and only with wait: a request that does not wait registers nothing.
func (s *Server) longPoll(ctx context.Context, wait time.Duration, compute func() verification.Result, watch func() (<-chan struct{}, func())) verification.Result {
	if wait <= 0 {
		return compute()
	}
	ch, stop := watch()
	defer func() { stop() }()
	first := compute()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ch:
			stop()
			ch, stop = watch()
			if res := compute(); res.Phase != first.Phase {
				return res
			}
		case <-timer.C:
			return compute()
		case <-ctx.Done():
			return compute()
		}
	}
}

func (s *Server) input(ctx context.Context, key types.NamespacedName, q verification.Query) verification.Input {
	st, err := s.o.Stacks.Stack(ctx, key)
	if err != nil {
		s.o.Log.Error(err, "Reading the Stack from the cache failed", "stack", key)
	}
	return verification.Input{
		Namespace: key.Namespace, Name: key.Name, Stack: st, Query: q, Now: s.o.Now(),
		Update: func(name string) *autov1alpha1.Update {
			if name == "" {
				return nil
			}
			return s.o.Stacks.Update(ctx, types.NamespacedName{Namespace: key.Namespace, Name: name})
		},
	}
}

func (s *Server) stackKey(w http.ResponseWriter, r *http.Request) (types.NamespacedName, bool) {
	key := types.NamespacedName{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	if errs := validation.IsDNS1123Label(key.Namespace); len(errs) > 0 {
		s.fail(w, r, http.StatusBadRequest, httperror.BadRequest, fmt.Sprintf("namespace %q is invalid: %s", truncate(key.Namespace, 100), errs[0]))
		return key, false
	}
	if errs := validation.IsDNS1123Subdomain(key.Name); len(errs) > 0 {
		s.fail(w, r, http.StatusBadRequest, httperror.BadRequest, fmt.Sprintf("stack name %q is invalid: %s", truncate(key.Name, 100), errs[0]))
		return key, false
	}
	return key, true
}

// guard answers a Guard error (see Guard); 0 when access is allowed.
func (s *Server) guard(w http.ResponseWriter, r *http.Request, err error) int {
	if err == nil {
		return 0
	}
	if httperror.Status(err) == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", challenge)
	}
	return httperror.Error(w, r, s.o.Log.WithValues("check", "access"), err)
}

// challenge is the WWW-Authenticate header of a 401 (RFC 6750).
const challenge = `Bearer realm="stackflow-analysis"`

func (s *Server) reply(w http.ResponseWriter, res verification.Result) int {
	writeJSON(w, http.StatusOK, res)
	return http.StatusOK
}

// fail answers a request the caller got wrong, in the service's own words.
func (s *Server) fail(w http.ResponseWriter, _ *http.Request, code int, reason httperror.Reason, msg string) int {
	httperror.Write(w, code, reason, msg)
	return code
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
