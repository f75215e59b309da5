package images

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// goBuild compiles packages for one platform with a single go build (shared
// compilation, one link per binary) into dir, and returns each package's
// executable. The flags make the output depend only on the sources, the
// go.mod dependency set and the Go toolchain: -trimpath (no local paths),
// -buildvcs=false (no VCS stamp; the revision is in the image labels), no
// cgo, the default GOAMD64/GOARM64 levels, -s -w (no symbol table or DWARF;
// panics still print stack traces), and version in main.version of the
// binaries that have one (-X is a no-op in the others).
func goBuild(ctx context.Context, moduleRoot, dir string, p v1.Platform, version string, packages []string) (map[string]string, error) {
	if p.OS != "linux" {
		return nil, fmt.Errorf("platform %s: only linux images are built", p.String())
	}
	out := map[string]string{}
	byBase := map[string]string{}
	for _, pkg := range packages {
		base := path.Base(pkg)
		if other, ok := byBase[base]; ok && other != pkg {
			return nil, fmt.Errorf("packages %s and %s would both build %s", other, pkg, base)
		}
		byBase[base] = pkg
		out[pkg] = filepath.Join(dir, base)
	}
	sorted := append([]string(nil), packages...)
	sort.Strings(sorted)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args := []string{"build", "-trimpath", "-buildvcs=false",
		"-ldflags=-s -w -X main.version=" + version,
		"-o", dir + string(filepath.Separator)}
	args = append(args, sorted...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = moduleRoot
	cmd.Env = append(os.Environ(),
		"CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture,
		"GOAMD64=v1", "GOARM64=v8.0", "GOFLAGS=-mod=readonly",
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build for %s: %w\n%s", p.String(), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
