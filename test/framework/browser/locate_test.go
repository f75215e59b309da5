package browser

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLocate: STACKFLOW_CHROMIUM wins (and must be an executable), else
// chromium, then chromium-browser, on PATH.
func TestLocate(t *testing.T) {
	dir := t.TempDir()
	exe := func(name string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	t.Setenv("PATH", dir)
	t.Setenv(EnvBinary, "")
	if bin, err := Locate(); err == nil || !strings.Contains(err.Error(), "neither chromium nor chromium-browser is on PATH") {
		t.Errorf("Locate() with nothing = %q, %v; want an error saying so", bin, err)
	}
	browserBin := exe("chromium-browser")
	if bin, err := Locate(); err != nil || bin != browserBin {
		t.Errorf("Locate() = %q, %v; want %s", bin, err, browserBin)
	}
	chromiumBin := exe("chromium")
	if bin, err := Locate(); err != nil || bin != chromiumBin {
		t.Errorf("Locate() = %q, %v; want %s (chromium before chromium-browser)", bin, err, chromiumBin)
	}
	other := exe("my-chromium")
	t.Setenv(EnvBinary, other)
	if bin, err := Locate(); err != nil || bin != other {
		t.Errorf("Locate() with %s=%s = %q, %v", EnvBinary, other, bin, err)
	}
	t.Setenv(EnvBinary, filepath.Join(dir, "absent"))
	if bin, err := Locate(); err == nil || !strings.Contains(err.Error(), "is not an executable") {
		t.Errorf("Locate() with %s naming nothing = %q, %v; want an error (not a fallback to PATH)", EnvBinary, bin, err)
	}
}

// TestMissingChromium: without Chromium, a test fails where apt-get could
// install it (saying to run the substrate step), and is skipped elsewhere
// (saying how to install it).
func TestMissingChromium(t *testing.T) {
	_, err := func() (string, error) { t.Setenv("PATH", t.TempDir()); t.Setenv(EnvBinary, ""); return Locate() }()
	if err == nil {
		t.Fatal("Locate() found Chromium on an empty PATH")
	}
	if skip, msg := missing(err, true); skip || !strings.Contains(msg, "run `hack/substrate.sh chromium`") {
		t.Errorf("with apt-get: skip %v, %q; want a failure naming hack/substrate.sh chromium", skip, msg)
	}
	if skip, msg := missing(err, false); !skip || !strings.Contains(msg, "no apt-get") || !strings.Contains(msg, EnvBinary) {
		t.Errorf("without apt-get: skip %v, %q; want a skip saying how to install it", skip, msg)
	}
}
