package images

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const testVersion = "v0.0.0-test"

// platforms are the platforms TestStackflowImages builds the release images
// for. make test builds linux/amd64 only: cross-compiling every binary's
// dependencies for arm64 is a second full compilation (~8 CPU-minutes cold)
// that tests nothing the amd64 build and TestMultiPlatformIndex do not.
// make test-images passes -images.platforms=linux/amd64,linux/arm64, the
// platforms make images publishes.
var platforms = flag.String("images.platforms", "linux/amd64",
	"comma-separated platforms TestStackflowImages builds (make test-images: linux/amd64,linux/arm64)")

// run is one command the test runs from an extracted amd64 binary.
type run struct {
	path string
	args []string
	want string // in the combined output
}

// smoke lists, per image, the binaries' --help and --version runs. The
// operator and the agent have no --version flag (not added here): only
// their help is run. The agent's flags belong to "agent serve".
var smoke = map[string][]run{
	"stackflow-operator": {
		{path: "/operator", args: []string{"--help"}, want: "-agent-image"},
		{path: "/agent", args: []string{"serve", "-h"}, want: "-listen"},
	},
	"stackflow-analysis": {
		{path: "/stackflow-analysis", args: []string{"--help"}, want: "Usage: stackflow-analysis"},
		{path: "/stackflow-analysis", args: []string{"--version"}, want: "stackflow-analysis " + testVersion},
	},
	"stackflow-kargo": {
		{path: "/stackflow-kargo", args: []string{"--help"}, want: "stackflow-kargo set-commit"},
		{path: "/stackflow-kargo", args: []string{"--version"}, want: "stackflow-kargo " + testVersion},
	},
}

func testOptions(t *testing.T) Options {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	src, err := GitSource(context.Background(), root, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(src.Revision) != 40 {
		t.Fatalf("revision %q is not a full SHA", src.Revision)
	}
	src.Version = testVersion
	ps, err := ParsePlatforms(*platforms)
	if err != nil {
		t.Fatalf("-images.platforms: %v", err)
	}
	return Options{
		ModuleRoot: root,
		Platforms:  ps,
		Source:     src,
		SourceURL:  DefaultSourceURL,
		CABundle:   DefaultCABundle,
		Logf:       t.Logf,
	}
}

// TestStackflowImages builds every image for the platforms of
// -images.platforms (make test: linux/amd64; make test-images: linux/amd64
// and linux/arm64), writes and reads back the OCI layouts, checks each image's
// config and files, runs the amd64 binaries, rebuilds to compare digests and
// pushes to an in-process registry.
func TestStackflowImages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every binary twice for two platforms")
	}
	if _, err := os.Stat(DefaultCABundle); err != nil {
		t.Fatalf("no CA bundle on this machine (%v): install Debian's ca-certificates package", err)
	}
	ctx := context.Background()
	opts := testOptions(t)
	specs := Stackflow()

	start := time.Now()
	built, err := Build(ctx, opts, specs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first build: %s", time.Since(start).Round(time.Millisecond))

	out := t.TempDir()
	digests := map[string]v1.Hash{}
	for _, b := range built {
		path, err := WriteLayout(out, b)
		if err != nil {
			t.Fatal(err)
		}
		idx, err := ReadLayout(path)
		if err != nil {
			t.Fatal(err)
		}
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests[b.Spec.Name] = d
		if want, _ := b.Index.Digest(); d != want {
			t.Errorf("%s: layout holds %s, built %s", b.Spec.Name, d, want)
		}
		sizes, err := Sizes(b)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s %s: %+v", b.Spec.Name, d, sizes)
		t.Run(b.Spec.Name, func(t *testing.T) { checkIndex(t, opts, b.Spec, idx) })
	}

	t.Run("layout index.json", func(t *testing.T) {
		raw, err := os.ReadFile(filepath.Join(out, "stackflow-operator", "index.json"))
		if err != nil {
			t.Fatal(err)
		}
		var m v1.IndexManifest
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		if len(m.Manifests) != 1 || m.Manifests[0].MediaType != types.OCIImageIndex ||
			m.Manifests[0].Annotations[refNameAnnotation] != testVersion || m.Manifests[0].Digest != digests["stackflow-operator"] {
			t.Errorf("index.json = %s", raw)
		}
	})

	t.Run("digests are stable", func(t *testing.T) {
		start := time.Now()
		again, err := Build(ctx, opts, specs)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("second build: %s", time.Since(start).Round(time.Millisecond))
		for _, b := range again {
			d, err := b.Index.Digest()
			if err != nil {
				t.Fatal(err)
			}
			if d != digests[b.Spec.Name] {
				t.Errorf("%s: second build %s, first %s", b.Spec.Name, d, digests[b.Spec.Name])
			}
		}
	})

	t.Run("push", func(t *testing.T) {
		// go-containerregistry's in-process registry, a faithful local
		// implementation of the distribution API: no real registry is
		// reachable from here.
		srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
		defer srv.Close()
		reg := strings.TrimPrefix(srv.URL, "http://") + "/stackflow-io"
		for _, b := range built {
			ref, err := Push(ctx, reg, b)
			if err != nil {
				t.Fatal(err)
			}
			if want := reg + "/" + b.Spec.Name + ":" + testVersion; ref.String() != want {
				t.Errorf("pushed %s, want %s", ref, want)
			}
			pulled, err := remote.Index(ref, remote.WithContext(ctx))
			if err != nil {
				t.Fatal(err)
			}
			if d, _ := pulled.Digest(); d != digests[b.Spec.Name] {
				t.Errorf("%s: pulled %s, pushed %s", b.Spec.Name, d, digests[b.Spec.Name])
			}
			for _, p := range opts.Platforms {
				checkPulledPlatform(t, ctx, ref, b.Spec.Name, p)
			}
		}
	})
}

// checkIndex checks an image set read back from its layout.
func checkIndex(t *testing.T, opts Options, s Spec, idx v1.ImageIndex) {
	t.Helper()
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s", m.MediaType)
	}
	if got := m.Annotations["org.opencontainers.image.revision"]; got != opts.Source.Revision {
		t.Errorf("index revision annotation %q, want %q", got, opts.Source.Revision)
	}
	var got, want []string
	for _, d := range m.Manifests {
		got = append(got, d.Platform.String())
	}
	for _, p := range opts.Platforms {
		want = append(want, p.String())
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("platforms %v, want %v", got, want)
	}
	for _, d := range m.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(d.Platform.String(), func(t *testing.T) { checkImage(t, opts, s, *d.Platform, img) })
	}
}

func checkImage(t *testing.T, opts Options, s Spec, p v1.Platform, img v1.Image) {
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != p.OS || cfg.Architecture != p.Architecture {
		t.Errorf("config platform %s/%s", cfg.OS, cfg.Architecture)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("User %q", cfg.Config.User)
	}
	if strings.Join(cfg.Config.Entrypoint, " ") != strings.Join(s.Entrypoint, " ") {
		t.Errorf("Entrypoint %q, want %q", cfg.Config.Entrypoint, s.Entrypoint)
	}
	if !cfg.Created.Equal(opts.Source.Created) {
		t.Errorf("Created %s, want the commit time %s", cfg.Created, opts.Source.Created)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.source":   DefaultSourceURL,
		"org.opencontainers.image.revision": opts.Source.Revision,
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.title":    s.Name,
	} {
		if got := cfg.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if cfg.Config.Labels["org.opencontainers.image.description"] == "" {
		t.Error("no description label")
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s", mt)
	}

	files := flatten(t, img)
	ca, err := os.ReadFile(DefaultCABundle)
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := files[strings.TrimPrefix(CABundlePath, "/")]; !ok || !bytes.Equal(f.content, ca) {
		t.Errorf("%s missing or not the host's bundle", CABundlePath)
	}
	if !strings.Contains(string(files["etc/passwd"].content), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd: %q", files["etc/passwd"].content)
	}
	if !strings.Contains(string(files["etc/group"].content), "nonroot:x:65532:") {
		t.Errorf("/etc/group: %q", files["etc/group"].content)
	}
	for name, f := range files {
		if !f.hdr.ModTime.Equal(opts.Source.Created) {
			t.Errorf("%s: mtime %s, want %s", name, f.hdr.ModTime, opts.Source.Created)
		}
	}
	for _, d := range s.Dirs {
		f, ok := files[strings.TrimPrefix(d.Path, "/")] // Extract cleans names
		if !ok || f.hdr.Typeflag != tar.TypeDir || f.hdr.Mode != d.Mode {
			t.Errorf("directory %s: %+v", d.Path, f.hdr)
		}
	}
	wantMachine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.Architecture]
	for _, b := range s.Binaries {
		f, ok := files[strings.TrimPrefix(b.Path, "/")]
		if !ok {
			t.Errorf("no %s", b.Path)
			continue
		}
		if f.hdr.Mode != 0o755 || f.hdr.Uid != 0 {
			t.Errorf("%s: mode %#o uid %d", b.Path, f.hdr.Mode, f.hdr.Uid)
		}
		e, err := elf.NewFile(bytes.NewReader(f.content))
		if err != nil {
			t.Errorf("%s: %v", b.Path, err)
			continue
		}
		if e.Machine != wantMachine {
			t.Errorf("%s: ELF machine %s, want %s", b.Path, e.Machine, wantMachine)
		}
		if interp := e.Section(".interp"); interp != nil {
			t.Errorf("%s is dynamically linked", b.Path)
		}
	}
	if p.Architecture != "amd64" {
		return
	}
	dir := t.TempDir()
	for _, r := range smoke[s.Name] {
		exe := filepath.Join(dir, filepath.Base(r.path))
		if err := os.WriteFile(exe, files[strings.TrimPrefix(r.path, "/")].content, 0o755); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, exe, r.args...).CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("%s %s: %v\n%s", r.path, strings.Join(r.args, " "), err, out)
		} else if !strings.Contains(string(out), r.want) {
			t.Errorf("%s %s printed no %q:\n%s", r.path, strings.Join(r.args, " "), r.want, out)
		}
	}
	if len(smoke[s.Name]) == 0 {
		t.Errorf("no smoke runs for %s", s.Name)
	}
}

// checkPulledPlatform pulls ref's image for platform p and checks its config says p.
func checkPulledPlatform(t *testing.T, ctx context.Context, ref name.Reference, image string, p v1.Platform) {
	t.Helper()
	img, err := remote.Image(ref, remote.WithContext(ctx), remote.WithPlatform(p))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != p.OS || cfg.Architecture != p.Architecture {
		t.Errorf("%s: pulled %s, got %s/%s", image, p.String(), cfg.OS, cfg.Architecture)
	}
}

type file struct {
	hdr     *tar.Header
	content []byte
}

// flatten reads the image's filesystem, layers applied.
func flatten(t *testing.T, img v1.Image) map[string]file {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]file{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = file{hdr: h, content: b}
	}
}
