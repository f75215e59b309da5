package substrate

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// RepoRoot is the repository root, found from this file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// Paths are the directories holding the substrate binaries.
type Paths struct {
	// KubeAssets holds kube-apiserver and etcd (KUBEBUILDER_ASSETS).
	KubeAssets string
	// PulumiRoot holds bin/pulumi (auto.PulumiCommandOptions.Root).
	PulumiRoot string
	// LanguageYAML holds pulumi-language-yaml.
	LanguageYAML string
	// Rollouts holds rollouts-controller and Argo Rollouts' CRDs in crds/.
	Rollouts string
	// Kargo holds the kargo binary (Kargo's control plane), credential-helper
	// and Kargo's CRDs in crds/ (`hack/substrate.sh kargo`); $STACKFLOW_KARGO,
	// when set, wins. Built only where Kargo's shared source is (KargoSource).
	Kargo string
}

// KargoSource is where Kargo's Go source is expected: the shared reference
// data beside the repository root (../shared/kargo/src), or
// $STACKFLOW_KARGO_SRC as for hack/substrate.sh (a worktree elsewhere). A
// checkout without it builds no Kargo, and the tests that run Kargo skip.
func KargoSource() string {
	if dir := os.Getenv("STACKFLOW_KARGO_SRC"); dir != "" {
		return dir
	}
	return filepath.Join(RepoRoot(), "..", "shared", "kargo", "src")
}

var (
	pathsOnce sync.Once
	paths     Paths
	pathsErr  error
)

// Locate reads the binary locations from `hack/substrate.sh env`, the one place
// that knows the tool versions and the cache layout.
func Locate() (Paths, error) {
	pathsOnce.Do(func() {
		out, err := exec.Command(filepath.Join(RepoRoot(), "hack", "substrate.sh"), "env").Output()
		if err != nil {
			pathsErr = fmt.Errorf("run hack/substrate.sh env: %w", err)
			return
		}
		vars := map[string]string{}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
			if ok {
				vars[k] = v
			}
		}
		paths = Paths{
			KubeAssets:   vars["KUBEBUILDER_ASSETS"],
			PulumiRoot:   vars["STACKFLOW_PULUMI_ROOT"],
			LanguageYAML: vars["STACKFLOW_PULUMI_LANGUAGE_YAML"],
			Rollouts:     vars["STACKFLOW_ROLLOUTS"],
			Kargo:        vars["STACKFLOW_KARGO"],
		}
		if dir := os.Getenv("STACKFLOW_KARGO"); dir != "" {
			paths.Kargo = dir
		}
	})
	return paths, pathsErr
}

// require fails the test unless every named file exists, telling how to build it.
func require(t testing.TB, files ...string) {
	t.Helper()
	var missing []string
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.IsDir() {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("test substrate missing: %s\nbuild it with `make substrate` (or hack/substrate.sh all); the first build takes 20–40 minutes",
			strings.Join(missing, ", "))
	}
}

// MustLocate returns the substrate paths, failing the test when any binary is
// missing.
func MustLocate(t testing.TB) Paths {
	t.Helper()
	p, err := Locate()
	if err != nil {
		t.Fatalf("locate test substrate: %v", err)
	}
	require(t,
		filepath.Join(p.KubeAssets, "kube-apiserver"),
		filepath.Join(p.KubeAssets, "etcd"),
		filepath.Join(p.PulumiRoot, "bin", "pulumi"),
		filepath.Join(p.LanguageYAML, "pulumi-language-yaml"),
	)
	return p
}
