package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"
)

// epoch is every entry's modification time, so a tarball depends on its
// files' names and contents only.
var epoch = time.Unix(0, 0).UTC()

// TarGz builds a gzipped tarball of files (slash-separated relative name →
// content). The result is deterministic: entries in name order, regular files
// of mode 0644 owned by uid/gid 0 with a fixed modification time, no gzip
// name or time. The same files always yield the same bytes, hence the same
// digest (for a given Go release: compress/flate's output is not promised to
// be stable across releases).
func TarGz(files map[string][]byte) ([]byte, error) {
	names := slices.Sorted(maps.Keys(files))
	for _, name := range names {
		if err := checkName(name, files); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	for _, name := range names {
		data := files[name]
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     name,
			Size:     int64(len(data)),
			Mode:     0o644,
			ModTime:  epoch,
			Format:   tar.FormatUSTAR,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("tar entry %q: %w", name, err)
		}
		if _, err := tw.Write(data); err != nil {
			return nil, fmt.Errorf("tar entry %q: %w", name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close tarball: %w", err)
	}
	if err := gz.Close(); err != nil {
		return nil, fmt.Errorf("close gzip stream: %w", err)
	}
	return buf.Bytes(), nil
}

// checkName refuses names that are not clean relative paths inside the
// tarball, or that are also the directory of another entry.
func checkName(name string, files map[string][]byte) error {
	switch {
	case name == "" || name == "." || path.IsAbs(name) || path.Clean(name) != name:
		return fmt.Errorf("tar entry %q: not a clean relative path", name)
	case name == ".." || strings.HasPrefix(name, "../"):
		return fmt.Errorf("tar entry %q: escapes the tarball", name)
	case strings.ContainsAny(name, "\\\x00"):
		return fmt.Errorf("tar entry %q: backslash or NUL in name", name)
	}
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		if _, ok := files[dir]; ok {
			return fmt.Errorf("tar entry %q: %q is a file, not a directory", name, dir)
		}
	}
	return nil
}
