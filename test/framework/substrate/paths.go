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

	"golang.org/x/mod/modfile"
)

// modulePath is the main module's path, as go.mod declares it.
const modulePath = "github.com/stackflow-io/stackflow"

// RepoRoot is the repository root: found from this file's location when the
// binary was built with its source paths, else (built with -trimpath, as
// make builds and tests: the paths then start with the module path) the
// nearest directory at or above the working directory whose go.mod declares
// the main module. go test runs a test in its package's directory, and make
// runs the developer tools from the root. It panics, saying so, where neither
// finds it.
func RepoRoot() string {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
	}
	wd, err := os.Getwd()
	if err != nil {
		panic(fmt.Sprintf("finding the repository root: %v", err))
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if declaresModule(filepath.Join(dir, "go.mod"), modulePath) {
			return dir
		}
		if filepath.Dir(dir) == dir {
			panic(fmt.Sprintf("no go.mod of %s at or above %s: run from inside the repository", modulePath, wd))
		}
	}
}

// declaresModule reports whether the go.mod at path declares module mod.
func declaresModule(path, mod string) bool {
	b, err := os.ReadFile(path)
	return err == nil && modfile.ModulePath(b) == mod
}

// Paths are the directories holding the substrate binaries.
type Paths struct {
	// KubeAssets holds kube-apiserver and etcd (KUBEBUILDER_ASSETS).
	KubeAssets string
	// PulumiRoot holds bin/pulumi (auto.PulumiCommandOptions.Root).
	PulumiRoot string
	// LanguageYAML holds pulumi-language-yaml.
	LanguageYAML string
	// Rollouts holds rollouts-controller and its CRDs in crds/ (STACKFLOW_ROLLOUTS).
	Rollouts string
	// ArgoCD and ArgoCD3 hold the Argo CD v2 and v3 builds: the binary and
	// its CRDs in crds/ (STACKFLOW_ARGOCD, STACKFLOW_ARGOCD3).
	ArgoCD, ArgoCD3 string
	// Cluster holds the single-node cluster's other Kubernetes components
	// (STACKFLOW_CLUSTER).
	Cluster string
	// Netpol holds kube-network-policies (STACKFLOW_NETPOL).
	Netpol string
	// Kargo holds the kargo binary (Kargo's control plane), credential-helper
	// and Kargo's CRDs in crds/ (STACKFLOW_KARGO; `hack/substrate.sh kargo`,
	// built only where Kargo's source is: KargoSource).
	Kargo string
}

// KargoSource is where Kargo's Go source is expected, as hack/substrate.sh's
// KARGO_SRC: the shared reference data beside the repository root
// (../shared/kargo/src), or $STACKFLOW_KARGO_SRC (a worktree elsewhere). A
// checkout without it builds no Kargo, and the tests that run Kargo skip.
func KargoSource() string {
	if dir := os.Getenv("STACKFLOW_KARGO_SRC"); dir != "" {
		return dir
	}
	return filepath.Join(RepoRoot(), "..", "shared", "kargo", "src")
}

// envVars maps each substrate variable of `hack/substrate.sh env` to its field.
func (p *Paths) envVars() map[string]*string {
	return map[string]*string{
		"KUBEBUILDER_ASSETS":             &p.KubeAssets,
		"STACKFLOW_PULUMI_ROOT":          &p.PulumiRoot,
		"STACKFLOW_PULUMI_LANGUAGE_YAML": &p.LanguageYAML,
		"STACKFLOW_ROLLOUTS":             &p.Rollouts,
		"STACKFLOW_ARGOCD":               &p.ArgoCD,
		"STACKFLOW_ARGOCD3":              &p.ArgoCD3,
		"STACKFLOW_CLUSTER":              &p.Cluster,
		"STACKFLOW_NETPOL":               &p.Netpol,
		"STACKFLOW_KARGO":                &p.Kargo,
	}
}

var (
	pathsOnce sync.Once
	paths     Paths
	pathsErr  error
)

// Locate reads the binary locations from `hack/substrate.sh env`, the one place
// that knows the tool versions, the cache layout and which installed binaries
// are compatible, so that every test, `make run`, `make demo` and the binaries
// they build find the substrate without any variable exported. A STACKFLOW_*
// variable set in the environment overrides its entry (KUBEBUILDER_ASSETS is
// already weighed by the script, which takes it only when compatible).
func Locate() (Paths, error) {
	pathsOnce.Do(func() { paths, pathsErr = locate(os.Environ()) })
	return paths, pathsErr
}

// locate is Locate in the environment environ.
func locate(environ []string) (Paths, error) {
	cmd := exec.Command(filepath.Join(RepoRoot(), "hack", "substrate.sh"), "env")
	cmd.Env = environ
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Paths{}, fmt.Errorf("run hack/substrate.sh env: %w\n%s", err, stderr.Bytes())
	}
	getenv := func(k string) string {
		for _, kv := range environ {
			if v, ok := strings.CutPrefix(kv, k+"="); ok {
				return v
			}
		}
		return ""
	}
	var p Paths
	fields := p.envVars()
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if f, known := fields[k]; ok && known {
			*f = v
		}
	}
	for k, f := range fields {
		if v := getenv(k); v != "" && strings.HasPrefix(k, "STACKFLOW_") {
			*f = v
		}
	}
	return p, nil
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
