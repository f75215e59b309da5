package images

import (
	"bytes"
	"context"
	"debug/elf"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestMultiPlatformIndex builds an image of a small program (only the
// standard library to cross-compile) for linux/amd64 and linux/arm64, so that
// make test covers the multi-platform index that make images publishes
// without cross-compiling every release binary for arm64 (make test-images
// does that): one manifest per platform in the order given, each image's
// config and ELF machine its platform's, the amd64 program running, and each
// platform pulled back by platform from a registry.
func TestMultiPlatformIndex(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t)
	opts.Platforms = DefaultPlatforms()
	spec := Spec{
		Name:        "hello",
		Description: "the smallest image TestMultiPlatformIndex builds",
		Binaries:    []Binary{{Package: "./images/testdata/hello", Path: "/hello"}},
		Entrypoint:  []string{"/hello"},
	}
	built, err := Build(ctx, opts, []Spec{spec})
	if err != nil {
		t.Fatal(err)
	}
	idx := built[0].Index
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range m.Manifests {
		got = append(got, d.Platform.String())
	}
	if strings.Join(got, ",") != "linux/amd64,linux/arm64" {
		t.Fatalf("index platforms %v, want linux/amd64,linux/arm64", got)
	}
	wantMachine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for _, d := range m.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OS != d.Platform.OS || cfg.Architecture != d.Platform.Architecture {
			t.Errorf("%s: config says %s/%s", d.Platform, cfg.OS, cfg.Architecture)
		}
		f, ok := flatten(t, img)["hello"]
		if !ok {
			t.Fatalf("%s: no /hello", d.Platform)
		}
		e, err := elf.NewFile(bytes.NewReader(f.content))
		if err != nil {
			t.Fatalf("%s: /hello: %v", d.Platform, err)
		}
		if e.Machine != wantMachine[d.Platform.Architecture] {
			t.Errorf("%s: /hello is for %s", d.Platform, e.Machine)
		}
		if d.Platform.Architecture == "amd64" {
			exe := filepath.Join(t.TempDir(), "hello")
			if err := os.WriteFile(exe, f.content, 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := exec.CommandContext(ctx, exe).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "hello from linux/amd64" {
				t.Errorf("running the amd64 /hello: %v: %q", err, out)
			}
		}
	}

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref, err := Push(ctx, strings.TrimPrefix(srv.URL, "http://")+"/stackflow-io", built[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}} {
		checkPulledPlatform(t, ctx, ref, spec.Name, p)
	}
}
