package images

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// refNameAnnotation tags an index in an OCI layout's index.json (skopeo's
// oci:<dir>:<tag>, crane's layout tools).
const refNameAnnotation = "org.opencontainers.image.ref.name"

// WriteLayout writes b as the OCI image layout dir/<name>, replacing what
// was there: index.json points at the multi-platform index, tagged with the
// version. It returns the layout's path.
func WriteLayout(dir string, b Built) (string, error) {
	p := filepath.Join(dir, b.Spec.Name)
	if err := os.RemoveAll(p); err != nil {
		return "", err
	}
	lp, err := layout.Write(p, empty.Index)
	if err != nil {
		return "", err
	}
	anns := map[string]string{refNameAnnotation: refName(b)}
	if err := lp.AppendIndex(b.Index, layout.WithAnnotations(anns)); err != nil {
		return "", fmt.Errorf("writing the layout %s: %w", p, err)
	}
	return p, nil
}

func refName(b Built) string {
	m, err := b.Index.IndexManifest()
	if err == nil {
		if v := m.Annotations["org.opencontainers.image.version"]; v != "" {
			return v
		}
	}
	return "latest"
}

// ReadLayout returns the image index a WriteLayout wrote at path.
func ReadLayout(path string) (v1.ImageIndex, error) {
	lp, err := layout.FromPath(path)
	if err != nil {
		return nil, err
	}
	top, err := lp.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("layout %s: index.json lists %d manifests, want 1", path, len(m.Manifests))
	}
	return top.ImageIndex(m.Manifests[0].Digest)
}

// Reference is where b is pushed: <registry>/<name>:<version>.
func Reference(registry string, b Built) (name.Reference, error) {
	return name.NewTag(fmt.Sprintf("%s/%s:%s", registry, b.Spec.Name, refName(b)))
}

// Push uploads b's index, its images and their blobs to registry (e.g.
// ghcr.io/stackflow-io) as <registry>/<name>:<version>, authenticating with
// the default keychain (~/.docker/config.json, credential helpers) unless
// opts say otherwise. It returns the reference pushed.
func Push(ctx context.Context, registry string, b Built, opts ...remote.Option) (name.Reference, error) {
	ref, err := Reference(registry, b)
	if err != nil {
		return nil, err
	}
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	if err := remote.WriteIndex(ref, b.Index, opts...); err != nil {
		return nil, fmt.Errorf("pushing %s: %w", ref, err)
	}
	return ref, nil
}

// PlatformSize is one platform image's size: its layers compressed (what a
// pull downloads) and uncompressed (what it unpacks to).
type PlatformSize struct {
	Platform                 string
	Compressed, Uncompressed int64
}

// Sizes returns the size of each platform image of b.
func Sizes(b Built) ([]PlatformSize, error) {
	m, err := b.Index.IndexManifest()
	if err != nil {
		return nil, err
	}
	var out []PlatformSize
	for _, d := range m.Manifests {
		img, err := b.Index.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		layers, err := img.Layers()
		if err != nil {
			return nil, err
		}
		s := PlatformSize{Platform: d.Platform.String()}
		for _, l := range layers {
			c, err := l.Size()
			if err != nil {
				return nil, err
			}
			s.Compressed += c
			rc, err := l.Uncompressed()
			if err != nil {
				return nil, err
			}
			n, err := io.Copy(io.Discard, rc)
			rc.Close()
			if err != nil {
				return nil, err
			}
			s.Uncompressed += n
		}
		out = append(out, s)
	}
	return out, nil
}

// containerdNameAnnotation names an image in an OCI archive for containerd's
// importer (`ctr images import`), which takes it before ref.name.
const containerdNameAnnotation = "io.containerd.image.name"

// WriteArchive writes b as an OCI archive (a tar of an OCI image layout) at
// path, its index named ref (e.g. "stackflow.local/stackflow-pause:v1") for
// `ctr -n k8s.io images import` and tagged with ref's tag for other readers.
func WriteArchive(path string, b Built, ref name.Tag) error {
	dir, err := os.MkdirTemp(filepath.Dir(path), ".layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	anns := map[string]string{containerdNameAnnotation: ref.Name(), refNameAnnotation: ref.TagStr()}
	if err := lp.AppendIndex(b.Index, layout.WithAnnotations(anns)); err != nil {
		return fmt.Errorf("writing the layout of %s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := tarDir(tmp, dir); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// tarDir writes the regular files and directories under dir into a tar at path,
// sorted, with fixed metadata.
func tarDir(path, dir string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: time.Unix(0, 0)}
		if d.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			return tw.WriteHeader(h)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h.Typeflag, h.Size = tar.TypeReg, info.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
