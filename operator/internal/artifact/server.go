package artifact

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stackflow-io/stackflow/internal/httperror"
)

// ContentType is the media type artifacts are served with.
const ContentType = "application/gzip"

// Handler serves GET and HEAD of the store's artifacts at /<Path> (range and
// conditional requests included; the ETag is the content's hex digest). Any
// other path is 404: there are no directory listings, and a path is only
// served when it has the exact shape of an artifact path, so no request can
// reach outside Dir. Files are opened through an os.Root, which refuses
// symbolic links leading out of Dir as well. An artifact that is not in Dir is
// rebuilt with Render, when set, and served only when its digest is the one
// in the path. Mount it under a prefix with http.StripPrefix.
func (s *Store) Handler() http.Handler {
	return http.HandlerFunc(s.serveHTTP)
}

func (s *Store) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		httperror.Write(w, http.StatusMethodNotAllowed, httperror.MethodNotAllowed, "GET or HEAD only")
		return
	}
	rel, hexsum, ok := artifactPath(r.URL.Path)
	if !ok {
		notFound(w)
		return
	}
	if s.serveFile(w, r, rel, hexsum) {
		return
	}
	s.serveRendered(w, r, rel, hexsum)
}

// serveFile serves the artifact from Dir and reports whether it was there.
func (s *Store) serveFile(w http.ResponseWriter, r *http.Request, rel, hexsum string) bool {
	if s.Dir == "" {
		return false
	}
	root, err := os.OpenRoot(s.Dir)
	if err != nil {
		return false
	}
	defer root.Close()
	f, err := root.Open(filepath.FromSlash(rel))
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	setArtifactHeaders(w, hexsum)
	http.ServeContent(w, r, "", fi.ModTime(), f)
	return true
}

// serveRendered serves the object's artifact rebuilt by Render, when its
// digest is the requested one: the same bytes the publishing replica wrote.
func (s *Store) serveRendered(w http.ResponseWriter, r *http.Request, rel, hexsum string) {
	if s.Render == nil {
		notFound(w)
		return
	}
	parts := strings.Split(rel, "/") // checked by artifactPath: kind/namespace/name/file
	data, err := s.Render(r.Context(), parts[0], parts[1], parts[2])
	switch {
	case errors.Is(err, fs.ErrNotExist):
		notFound(w)
		return
	case err != nil:
		// The object could not be read (a cache not synced yet, say): the
		// error may name internals, so it is logged under the answer's
		// request ID, not echoed.
		w.Header().Set("Retry-After", "5")
		httperror.Fail(w, r, s.Log, http.StatusServiceUnavailable, httperror.ServiceUnavailable, "artifact temporarily unavailable; retry", err)
		return
	case Digest(data) != DigestPrefix+hexsum:
		// The object has changed since that artifact was published (or a
		// different build renders it differently): only the publisher had it.
		notFound(w)
		return
	}
	setArtifactHeaders(w, hexsum)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
}

func notFound(w http.ResponseWriter) {
	httperror.Write(w, http.StatusNotFound, httperror.NotFound, "no such artifact")
}

func setArtifactHeaders(w http.ResponseWriter, hexsum string) {
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("ETag", `"`+hexsum+`"`)
	h.Set("X-Content-Type-Options", "nosniff")
}

// artifactPath checks that a request path is exactly
// /<kind>/<namespace>/<name>/<64 hex>.tar.gz with valid segments, and returns
// it relative to the store's directory, with the hex digest.
func artifactPath(p string) (rel, hexsum string, ok bool) {
	rel, ok = strings.CutPrefix(p, "/")
	if !ok {
		return "", "", false
	}
	parts := strings.Split(rel, "/")
	if len(parts) != 4 || !fileRE.MatchString(parts[3]) {
		return "", "", false
	}
	for _, seg := range parts[:3] {
		if !validSegment(seg) {
			return "", "", false
		}
	}
	return rel, strings.TrimSuffix(parts[3], fileSuffix), true
}

// Server timeouts. Downloads are GETs without a body; the write timeout
// bounds a whole response, so it allows the largest artifact an agent accepts
// (256 MiB) at about 0.5 MB/s.
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 30 * time.Second
	WriteTimeout      = 10 * time.Minute
	IdleTimeout       = 2 * time.Minute
	// ShutdownTimeout is how long Serve waits for downloads in flight when
	// its context ends.
	ShutdownTimeout = 10 * time.Second
)

// NewServer returns an HTTP server for Handler with the timeouts above. Serve
// it on Listener(l) for Serving to report its state.
func (s *Store) NewServer() *http.Server {
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
	srv.RegisterOnShutdown(func() { s.serving.Store(false) }) // not ready while draining
	return srv
}

// Listener wraps l so that Serving reports true once a server accepts
// connections from it.
func (s *Store) Listener(l net.Listener) net.Listener {
	return &acceptingListener{Listener: l, accepting: &s.serving}
}

// Serve serves Handler on l until ctx ends, then shuts down gracefully
// (waiting up to ShutdownTimeout for downloads in flight).
func (s *Store) Serve(ctx context.Context, l net.Listener) error {
	srv := s.NewServer()
	defer s.serving.Store(false)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(s.Listener(l)) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(shutCtx)
	if serveErr := <-errc; !errors.Is(serveErr, http.ErrServerClosed) && err == nil {
		err = serveErr
	}
	return err
}

// Serving returns nil while a server (Serve, or NewServer on Listener) is
// accepting connections, and an error before it started and once it began
// shutting down (a readiness check).
func (s *Store) Serving() error {
	if !s.serving.Load() {
		return errors.New("the artifact server is not accepting connections")
	}
	return nil
}

// acceptingListener records that the server's accept loop runs: the first
// Accept call sets accepting.
type acceptingListener struct {
	net.Listener
	accepting *atomic.Bool
	once      sync.Once
}

func (l *acceptingListener) Accept() (net.Conn, error) {
	l.once.Do(func() { l.accepting.Store(true) })
	return l.Listener.Accept()
}
