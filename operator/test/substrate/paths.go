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
	// ArgoCD and ArgoCD3 hold the Argo CD v2 and v3 builds (operator/test/argocd
	// reads them; STACKFLOW_ARGOCD and STACKFLOW_ARGOCD3 override them there).
	ArgoCD, ArgoCD3 string
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
			ArgoCD:       vars["STACKFLOW_ARGOCD"],
			ArgoCD3:      vars["STACKFLOW_ARGOCD3"],
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
