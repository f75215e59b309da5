package images

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// DefaultSourceURL is org.opencontainers.image.source.
const DefaultSourceURL = "https://github.com/stackflow-io/stackflow"

// Options say how to build.
type Options struct {
	// ModuleRoot is the directory go build runs in (the repository root).
	ModuleRoot string
	// Platforms of every index, e.g. linux/amd64 and linux/arm64.
	Platforms []v1.Platform
	Source    Source
	// SourceURL is org.opencontainers.image.source.
	SourceURL string
	// Licenses is org.opencontainers.image.licenses (an SPDX expression);
	// empty leaves the label out.
	Licenses string
	// CABundle is the host file copied to CABundlePath.
	CABundle string
	// WorkDir receives the binaries; empty means a temporary directory,
	// removed afterwards.
	WorkDir string
	// Logf, if set, receives progress lines.
	Logf func(format string, args ...any)
	// FastCompression compresses the layers at gzip.BestSpeed rather than
	// the default level: larger layers in about a third of the time, for
	// images imported on this machine (the test cluster's) rather than
	// published. The layers are still reproducible for the same level.
	FastCompression bool
}

// gzipLevel is the layers' compression level.
func (opts Options) gzipLevel() int {
	if opts.FastCompression {
		return gzip.BestSpeed
	}
	return gzip.DefaultCompression
}

// DefaultPlatforms are linux/amd64 and linux/arm64.
func DefaultPlatforms() []v1.Platform {
	return []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}
}

// ParsePlatforms parses "linux/amd64,linux/arm64".
func ParsePlatforms(s string) ([]v1.Platform, error) {
	var out []v1.Platform
	seen := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := v1.ParsePlatform(f)
		if err != nil {
			return nil, err
		}
		if p.OS == "" || p.Architecture == "" {
			return nil, fmt.Errorf("platform %q: want os/arch", f)
		}
		if seen[p.String()] {
			return nil, fmt.Errorf("platform %s given twice", p.String())
		}
		seen[p.String()] = true
		out = append(out, *p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no platforms in %q", s)
	}
	return out, nil
}

// Built is one image set: a spec and its multi-platform index.
type Built struct {
	Spec  Spec
	Index v1.ImageIndex
}

// Build compiles the binaries of specs for every platform and assembles one
// OCI index per spec. Nothing is written outside WorkDir; see WriteLayout
// and Push.
func Build(ctx context.Context, opts Options, specs []Spec) ([]Built, error) {
	if err := opts.validate(specs); err != nil {
		return nil, err
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	work := opts.WorkDir
	if work == "" {
		d, err := os.MkdirTemp("", "stackflow-images-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		work = d
	}
	var packages []string
	seen := map[string]bool{}
	for _, s := range specs {
		for _, b := range s.Binaries {
			if !seen[b.Package] {
				seen[b.Package], packages = true, append(packages, b.Package)
			}
		}
	}
	// executables[platform][package] is the built file. The platforms are
	// built at once: linking is mostly single-threaded.
	executables := make([]map[string]string, len(opts.Platforms))
	err := parallel(len(opts.Platforms), func(i int) error {
		p := opts.Platforms[i]
		start := time.Now()
		dir := fmt.Sprintf("%s/%s_%s", work, p.OS, p.Architecture)
		out, err := goBuild(ctx, opts.ModuleRoot, dir, p, opts.Source.Version, packages)
		if err != nil {
			return err
		}
		executables[i] = out
		logf("go build %s: %d binaries in %s", p.String(), len(packages), time.Since(start).Round(time.Millisecond))
		return nil
	})
	if err != nil {
		return nil, err
	}

	start := time.Now()
	baseFiles, err := baseEntries(opts.CABundle)
	if err != nil {
		return nil, err
	}
	base, err := layerAt(baseFiles, opts.Source.Created, opts.gzipLevel())
	if err != nil {
		return nil, err
	}
	// images[spec*len(platforms)+platform], compressed in parallel.
	n := len(opts.Platforms)
	imgs := make([]v1.Image, len(specs)*n)
	err = parallel(len(imgs), func(i int) error {
		s, p := specs[i/n], opts.Platforms[i%n]
		img, err := image(s, opts, p, base, executables[i%n])
		if err != nil {
			return fmt.Errorf("image %s for %s: %w", s.Name, p.String(), err)
		}
		imgs[i] = img
		return nil
	})
	if err != nil {
		return nil, err
	}
	var built []Built
	for si, s := range specs {
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		var adds []mutate.IndexAddendum
		for pi, p := range opts.Platforms {
			platform := p
			adds = append(adds, mutate.IndexAddendum{Add: imgs[si*n+pi], Descriptor: v1.Descriptor{Platform: &platform}})
		}
		idx = mutate.AppendManifests(idx, adds...)
		idx = mutate.Annotations(idx, opts.labels(s)).(v1.ImageIndex)
		built = append(built, Built{Spec: s, Index: idx})
	}
	logf("layers and manifests of %d images: %s", len(specs), time.Since(start).Round(time.Millisecond))
	return built, nil
}

func (opts Options) validate(specs []Spec) error {
	if len(opts.Platforms) == 0 {
		return fmt.Errorf("no platforms")
	}
	if opts.Source.Revision == "" || opts.Source.Created.IsZero() {
		return fmt.Errorf("the source revision and time are required")
	}
	if err := ValidVersion(opts.Source.Version); err != nil {
		return err
	}
	if len(specs) == 0 {
		return fmt.Errorf("no images")
	}
	names := map[string]bool{}
	for _, s := range specs {
		if err := s.Validate(); err != nil {
			return err
		}
		if names[s.Name] {
			return fmt.Errorf("image %s given twice", s.Name)
		}
		if len(s.Platforms) > 0 {
			for _, p := range opts.Platforms {
				if !slices.Contains(s.Platforms, p.String()) {
					return fmt.Errorf("image %s can only be built for %s, not %s", s.Name, strings.Join(s.Platforms, ", "), p.String())
				}
			}
		}
		names[s.Name] = true
	}
	return nil
}

// parallel runs f(0…n-1) on up to GOMAXPROCS goroutines and returns their
// errors joined.
func parallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// labels are the OCI annotations of an image set, as image config labels
// and as annotations of its index.
func (opts Options) labels(s Spec) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":    s.Name,
		"org.opencontainers.image.version":  opts.Source.Version,
		"org.opencontainers.image.revision": opts.Source.Revision,
		"org.opencontainers.image.created":  opts.Source.Created.UTC().Format(time.RFC3339),
	}
	if s.Description != "" {
		l["org.opencontainers.image.description"] = s.Description
	}
	if opts.SourceURL != "" {
		l["org.opencontainers.image.source"] = opts.SourceURL
		l["org.opencontainers.image.url"] = opts.SourceURL
	}
	if opts.Licenses != "" {
		l["org.opencontainers.image.licenses"] = opts.Licenses
	}
	return l
}

// image is one platform's image of s: the base layer, then one layer with
// the spec's binaries, files and directories.
func image(s Spec, opts Options, p v1.Platform, base v1.Layer, executables map[string]string) (v1.Image, error) {
	var entries []entry
	for _, b := range s.Binaries {
		content, err := os.ReadFile(executables[b.Package])
		if err != nil {
			return nil, err
		}
		entries = append(entries, entry{path: b.Path, mode: 0o755, content: content})
	}
	for _, f := range s.Files {
		content := f.Content
		if f.Source != "" {
			var err error
			if content, err = os.ReadFile(f.Source); err != nil {
				return nil, err
			}
		}
		entries = append(entries, entry{path: f.Path, mode: f.Mode, content: content})
	}
	for _, d := range s.Dirs {
		entries = append(entries, entry{path: d.Path, dir: true, mode: d.Mode, uid: d.UID, gid: d.GID})
	}
	if len(s.Users) > 0 {
		pw, gr := passwd, group
		for _, u := range s.Users {
			pw += fmt.Sprintf("%s:x:%d:%d:%s:%s:/sbin/nologin\n", u.Name, u.UID, u.GID, u.Name, u.Home)
			gr += fmt.Sprintf("%s:x:%d:\n", u.Name, u.GID)
		}
		entries = append(entries,
			entry{path: "/etc/passwd", mode: 0o644, content: []byte(pw)},
			entry{path: "/etc/group", mode: 0o644, content: []byte(gr)})
	}
	app, err := layerAt(entries, opts.Source.Created, opts.gzipLevel())
	if err != nil {
		return nil, err
	}

	created := v1.Time{Time: opts.Source.Created}
	cfg := &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Variant:      p.Variant,
		Created:      created,
		Config: v1.Config{
			User:       User,
			Entrypoint: s.Entrypoint,
			Cmd:        s.Cmd,
			Env:        mergeEnv([]string{"PATH=/usr/local/bin:/usr/bin:/bin:/", "SSL_CERT_FILE=" + CABundlePath}, s.Env),
			WorkingDir: "/",
			Labels:     opts.labels(s),
		},
	}
	if len(s.ExposedPorts) > 0 {
		cfg.Config.ExposedPorts = map[string]struct{}{}
		ports := append([]string(nil), s.ExposedPorts...)
		sort.Strings(ports)
		for _, port := range ports {
			cfg.Config.ExposedPorts[port] = struct{}{}
		}
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{Created: created, CreatedBy: "stackflow-images", Comment: "CA bundle, nonroot user"}},
		mutate.Addendum{Layer: app, MediaType: types.OCILayer, History: v1.History{Created: created, CreatedBy: "stackflow-images", Comment: s.Name + " binaries and files"}},
	)
}

// mergeEnv is base with extra added, a variable of extra replacing base's of
// the same name (runtimes disagree on which of two definitions wins).
func mergeEnv(base, extra []string) []string {
	out := append([]string(nil), base...)
	for _, e := range extra {
		name, _, _ := strings.Cut(e, "=")
		out = slices.DeleteFunc(out, func(o string) bool { return strings.HasPrefix(o, name+"=") })
		out = append(out, e)
	}
	return out
}
