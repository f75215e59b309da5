package artifact

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ContentType is the media type artifacts are served with.
const ContentType = "application/gzip"

// Handler serves GET and HEAD of the store's artifacts at /<Path> (range and
// conditional requests included; the ETag is the content's hex digest). Any
// other path is 404: there are no directory listings, and a path is only
// served when it has the exact shape of an artifact path, so no request can
// reach outside Dir. Files are opened through an os.Root, which refuses
// symbolic links leading out of Dir as well. Mount it under a prefix with
// http.StripPrefix.
func (s *Store) Handler() http.Handler {
	return http.HandlerFunc(s.serveHTTP)
}

func (s *Store) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	rel, hexsum, ok := artifactPath(r.URL.Path)
	if !ok || s.Dir == "" {
		http.NotFound(w, r)
		return
	}
	root, err := os.OpenRoot(s.Dir)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer root.Close()
	f, err := root.Open(filepath.FromSlash(rel))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("ETag", `"`+hexsum+`"`)
	h.Set("X-Content-Type-Options", "nosniff")
	http.ServeContent(w, r, "", fi.ModTime(), f)
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

// Serve serves Handler on l until ctx ends, then shuts down gracefully
// (waiting up to ten seconds for downloads in flight).
func (s *Store) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := srv.Shutdown(shutCtx)
	if serveErr := <-errc; !errors.Is(serveErr, http.ErrServerClosed) && err == nil {
		err = serveErr
	}
	return err
}
