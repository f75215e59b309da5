package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// entry is one file or directory of a layer.
type entry struct {
	path     string // absolute, clean
	dir      bool
	mode     int64
	uid, gid int
	content  []byte
}

// layer returns a gzip-compressed OCI layer holding entries, byte for byte
// the same for the same entries and mtime: entries sorted by path, missing
// parent directories added (0755, root), every timestamp mtime, no user or
// group names, the PAX format only where USTAR cannot hold a header.
func layer(entries []entry, mtime time.Time) (v1.Layer, error) {
	return layerAt(entries, mtime, gzip.DefaultCompression)
}

// layerAt is layer compressed at a gzip level (gzip.BestSpeed for images
// that never leave the machine).
func layerAt(entries []entry, mtime time.Time, level int) (v1.Layer, error) {
	byPath := map[string]entry{}
	for _, e := range entries {
		if _, dup := byPath[e.path]; dup {
			return nil, fmt.Errorf("layer: %s given twice", e.path)
		}
		byPath[e.path] = e
	}
	for _, e := range entries {
		for d := path.Dir(e.path); d != "/"; d = path.Dir(d) {
			if p, ok := byPath[d]; ok {
				if !p.dir {
					return nil, fmt.Errorf("layer: %s is a file and the parent of %s", d, e.path)
				}
				continue
			}
			byPath[d] = entry{path: d, dir: true, mode: 0o755}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	mtime = mtime.UTC().Truncate(time.Second)
	for _, p := range paths {
		e := byPath[p]
		h := &tar.Header{
			Name:    strings.TrimPrefix(p, "/"),
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: mtime,
		}
		if e.dir {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
			if h.Mode == 0 {
				h.Mode = 0o755
			}
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.content))
			if h.Mode == 0 {
				h.Mode = 0o644
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", p, err)
		}
		if _, err := tw.Write(e.content); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}

	// Compressed once here, so that go-containerregistry neither compresses
	// it again for the digest nor depends on its own compressor's output.
	// The gzip header carries no name and no time.
	var gzBuf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gzBuf, level)
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(zw, &tarBuf); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	compressed := gzBuf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(compressed)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
