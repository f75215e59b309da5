package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"

	"github.com/go-logr/logr"
)

// Artifact is one tarball in a Store.
type Artifact struct {
	// Path is the artifact's slash-separated path relative to the store's
	// directory and to the server's root: <kind>/<namespace>/<name>/<hex>.tar.gz.
	Path string
	// URL is where workspaces download the artifact: BaseURL joined with Path.
	URL string
	// Digest is the tarball's digest, "sha256:<hex>".
	Digest string
	// Size is the tarball's size in bytes.
	Size int64
}

// Store keeps artifacts on disk, addressed by the object they belong to and
// their content: <Dir>/<kind>/<namespace>/<name>/<sha256hex>.tar.gz. A file
// never changes once written, so a URL always means the same bytes.
//
// The methods for one object are meant to be called by one reconciler at a
// time (controller-runtime never reconciles one key concurrently); different
// objects may be written concurrently.
type Store struct {
	// Dir is the root directory; it is created when the first artifact is put.
	Dir string
	// BaseURL is the address workspaces download artifacts from, such as
	// "http://127.0.0.1:9090" or "http://stackflow-artifacts.stackflow-system.svc".
	BaseURL string
	// Render, when set, rebuilds an object's artifact that is not in Dir:
	// a replica that did not publish it (a follower, or a new leader that has
	// not republished yet) can still serve it, because artifacts are
	// deterministic. The handler serves the result only when its digest is the
	// one requested. Render returns an error wrapping fs.ErrNotExist when there
	// is no such object (404); any other error is answered 503, so the
	// client retries.
	Render RenderFunc
	// Log receives the detail of a failed Render, under the request ID of
	// the 503 that answered it; the zero Logger drops it.
	Log logr.Logger

	// serving is true while Serve accepts connections.
	serving atomic.Bool
}

// RenderFunc builds the current artifact of an object (kind, namespace, name).
type RenderFunc func(ctx context.Context, kind, namespace, name string) ([]byte, error)

const (
	// DigestPrefix starts every digest the store returns.
	DigestPrefix = "sha256:"
	// fileSuffix ends every artifact's file name.
	fileSuffix = ".tar.gz"
	// tmpPrefix starts the names of files being written.
	tmpPrefix = ".tmp-"
	// maxSegment bounds a kind, namespace or name (a DNS subdomain's length).
	maxSegment = 253
)

var (
	// segmentRE is what a kind, namespace or name may look like: Kubernetes
	// object names are DNS subdomains, and nothing else is accepted, so a
	// segment can never be ".", ".." or hold a separator.
	segmentRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
	// fileRE is an artifact's file name.
	fileRE = regexp.MustCompile(`^[0-9a-f]{64}\.tar\.gz$`)
)

// Digest returns the digest of data as the store records it, "sha256:<hex>".
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return DigestPrefix + hex.EncodeToString(sum[:])
}

// Put stores data as an artifact of the object and returns where it is. Writing
// is atomic (a temporary file renamed into place), and putting the same content
// again returns the same artifact without rewriting it.
func (s *Store) Put(kind, namespace, name string, data []byte) (Artifact, error) {
	dir, err := s.objectDir(kind, namespace, name)
	if err != nil {
		return Artifact{}, err
	}
	digest := Digest(data)
	hexsum := strings.TrimPrefix(digest, DigestPrefix)
	rel := path.Join(kind, namespace, name, hexsum+fileSuffix)
	a := Artifact{Path: rel, URL: s.url(rel), Digest: digest, Size: int64(len(data))}
	final := filepath.Join(dir, hexsum+fileSuffix)
	if existing, err := os.ReadFile(final); err == nil && bytes.Equal(existing, data) {
		return a, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Artifact{}, fmt.Errorf("create artifact directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return Artifact{}, fmt.Errorf("create artifact file: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return Artifact{}, fmt.Errorf("write artifact %s: %w", rel, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return Artifact{}, fmt.Errorf("write artifact %s: %w", rel, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return Artifact{}, fmt.Errorf("write artifact %s: %w", rel, err)
	}
	if err := tmp.Close(); err != nil {
		return Artifact{}, fmt.Errorf("write artifact %s: %w", rel, err)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return Artifact{}, fmt.Errorf("publish artifact %s: %w", rel, err)
	}
	return a, nil
}

// Prune removes the object's artifacts except the one whose digest is keep
// ("sha256:<hex>", as Put returns it; empty keeps none). Files being written
// that were left behind by a crash go too.
func (s *Store) Prune(kind, namespace, name string, keep string) error {
	dir, err := s.objectDir(kind, namespace, name)
	if err != nil {
		return err
	}
	keepFile := ""
	if keep != "" {
		hexsum, ok := strings.CutPrefix(keep, DigestPrefix)
		if !ok || !fileRE.MatchString(hexsum+fileSuffix) {
			return fmt.Errorf("digest to keep %q is not of the form sha256:<64 hex digits>", keep)
		}
		keepFile = hexsum + fileSuffix
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list artifacts of %s/%s/%s: %w", kind, namespace, name, err)
	}
	for _, e := range entries {
		n := e.Name()
		if n == keepFile || !(fileRE.MatchString(n) || strings.HasPrefix(n, tmpPrefix)) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("prune artifact %s/%s/%s/%s: %w", kind, namespace, name, n, err)
		}
	}
	return nil
}

// Remove deletes all artifacts of the object.
func (s *Store) Remove(kind, namespace, name string) error {
	dir, err := s.objectDir(kind, namespace, name)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove artifacts of %s/%s/%s: %w", kind, namespace, name, err)
	}
	return nil
}

// objectDir is the directory holding one object's artifacts.
func (s *Store) objectDir(kind, namespace, name string) (string, error) {
	if s.Dir == "" {
		return "", errors.New("artifact store has no directory")
	}
	for _, seg := range []struct{ what, v string }{{"kind", kind}, {"namespace", namespace}, {"name", name}} {
		if !validSegment(seg.v) {
			return "", fmt.Errorf("artifact %s %q is not a lowercase DNS name", seg.what, seg.v)
		}
	}
	return filepath.Join(s.Dir, kind, namespace, name), nil
}

func (s *Store) url(rel string) string {
	return strings.TrimSuffix(s.BaseURL, "/") + "/" + rel
}

func validSegment(v string) bool {
	return len(v) <= maxSegment && segmentRE.MatchString(v)
}
