package substrate

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// cleanEnv is a minimal environment, as a fresh shell would have it, with the
// given variables added: no STACKFLOW_* or KUBEBUILDER_ASSETS from the suite.
func cleanEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	goBin := filepath.Dir(mustLookPath(t, "go"))
	env := []string{
		"PATH=" + goBin + ":/usr/local/bin:/usr/bin:/bin",
		"HOME=" + os.Getenv("HOME"),
		// The Go caches stay where they are: `go version -m` needs no build.
		"GOCACHE=" + goEnv(t, "GOCACHE"), "GOMODCACHE=" + goEnv(t, "GOMODCACHE"),
	}
	return append(env, extra...)
}

func mustLookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func goEnv(t *testing.T, key string) string {
	t.Helper()
	out, err := exec.Command("go", "env", key).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// substrateSh runs hack/substrate.sh ARGS in env and returns its standard output
// and error.
func substrateSh(t *testing.T, env []string, args ...string) (string, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(RepoRoot(), "hack", "substrate.sh"), args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/substrate.sh %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out), stderr.String()
}

// link makes dir/name a symbolic link to target.
func link(t *testing.T, dir, name, target string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// script writes an executable shell script dir/name printing text for any
// arguments: a stand-in for an installed binary of another version.
func script(t *testing.T, dir, name, text string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\necho '"+text+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestSubstrateTakesInstalledBinaries places the real substrate binaries where
// a user would have them installed — pulumi and pulumi-language-yaml on PATH,
// kube-apiserver and etcd in KUBEBUILDER_ASSETS or in setup-envtest's store —
// with an empty cache, and checks that hack/substrate.sh takes them instead of
// building (saying so), that `env` and Locate point at them, and that
// binaries of an incompatible version are refused with the reason.
func TestSubstrateTakesInstalledBinaries(t *testing.T) {
	real := MustLocate(t)
	tmp := t.TempDir()
	cache := filepath.Join(tmp, "cache")
	bin := filepath.Join(tmp, "opt", "bin")
	link(t, bin, "pulumi", filepath.Join(real.PulumiRoot, "bin", "pulumi"))
	link(t, bin, "pulumi-language-yaml", filepath.Join(real.LanguageYAML, "pulumi-language-yaml"))
	assets := filepath.Join(tmp, "assets")
	link(t, assets, "kube-apiserver", filepath.Join(real.KubeAssets, "kube-apiserver"))
	link(t, assets, "etcd", filepath.Join(real.KubeAssets, "etcd"))

	withInstalled := func(extra ...string) []string {
		env := cleanEnv(t, append([]string{"STACKFLOW_CACHE=" + cache, "XDG_DATA_HOME=" + filepath.Join(tmp, "share")}, extra...)...)
		for i, kv := range env {
			if strings.HasPrefix(kv, "PATH=") {
				env[i] = "PATH=" + bin + ":" + strings.TrimPrefix(kv, "PATH=")
			}
		}
		return env
	}

	t.Run("compatible binaries are taken, nothing is built", func(t *testing.T) {
		env := withInstalled("KUBEBUILDER_ASSETS=" + assets)
		plan, _ := substrateSh(t, env, "plan", "run")
		for _, want := range []string{
			"kube           KUBEBUILDER_ASSETS " + assets + " (kube-apiserver v1.35",
			"pulumi-yaml    installed: pulumi-language-yaml v1.25",
			"pulumi         installed: pulumi v3.",
			"nothing to build",
		} {
			if !strings.Contains(plan, want) {
				t.Errorf("plan run lacks %q:\n%s", want, plan)
			}
		}
		_, log := substrateSh(t, env, "run")
		if !strings.Contains(log, "pulumi: using the installed pulumi v3.") || strings.Contains(log, "building") {
			t.Errorf("substrate.sh run did not just take the installed binaries:\n%s", log)
		}
		if entries, err := os.ReadDir(cache); err == nil {
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), "kube-") || strings.HasPrefix(e.Name(), "pulumi-v") || strings.HasPrefix(e.Name(), "pulumi-language-yaml-") {
					t.Errorf("%s was built into the cache", e.Name())
				}
			}
		}
		p, err := locate(env)
		if err != nil {
			t.Fatal(err)
		}
		// pulumi is in a bin/ directory, so its root is that directory's parent.
		if want := filepath.Dir(bin); p.PulumiRoot != want || p.LanguageYAML != bin || p.KubeAssets != assets {
			t.Errorf("Locate = %+v; want PulumiRoot %s, LanguageYAML %s, KubeAssets %s", p, want, bin, assets)
		}
	})

	t.Run("setup-envtest's store is found without KUBEBUILDER_ASSETS", func(t *testing.T) {
		store := filepath.Join(tmp, "share", "kubebuilder-envtest", "k8s", "1.35.4-linux-amd64")
		link(t, store, "kube-apiserver", filepath.Join(real.KubeAssets, "kube-apiserver"))
		link(t, store, "etcd", filepath.Join(real.KubeAssets, "etcd"))
		defer os.RemoveAll(filepath.Join(tmp, "share"))
		plan, _ := substrateSh(t, withInstalled(), "plan", "kube")
		if !strings.Contains(plan, "kube           installed: kube-apiserver v1.35") {
			t.Errorf("plan kube did not take setup-envtest's store:\n%s", plan)
		}
		p, err := locate(withInstalled())
		if err != nil {
			t.Fatal(err)
		}
		if p.KubeAssets != store {
			t.Errorf("KubeAssets = %s, want %s", p.KubeAssets, store)
		}
	})

	t.Run("incompatible versions are refused, with the reason", func(t *testing.T) {
		old := filepath.Join(tmp, "old", "bin")
		script(t, old, "pulumi", "v3.100.0")
		oldAssets := filepath.Join(tmp, "old-assets")
		script(t, oldAssets, "kube-apiserver", "Kubernetes v1.30.2")
		link(t, oldAssets, "etcd", filepath.Join(real.KubeAssets, "etcd"))
		env := cleanEnv(t, "STACKFLOW_CACHE="+cache, "XDG_DATA_HOME="+filepath.Join(tmp, "share"), "KUBEBUILDER_ASSETS="+oldAssets)
		for i, kv := range env {
			if strings.HasPrefix(kv, "PATH=") {
				env[i] = "PATH=" + old + ":" + strings.TrimPrefix(kv, "PATH=")
			}
		}
		plan, log := substrateSh(t, env, "plan", "kube", "pulumi")
		for _, want := range []string{"kube           to build", "pulumi         to build"} {
			if !strings.Contains(plan, want) {
				t.Errorf("plan lacks %q:\n%s", want, plan)
			}
		}
		for _, want := range []string{
			"KUBEBUILDER_ASSETS not taken: " + oldAssets + "/kube-apiserver is v1.30.2, not v1.35.x",
			old + "/pulumi not taken: v3.100.0, compatible is v3.274.0 up to (not including) v4.0.0",
		} {
			if !strings.Contains(log, want) {
				t.Errorf("stderr lacks %q:\n%s", want, log)
			}
		}
	})
}

// TestSubstrateKargoNeedsItsSource: Kargo is built from its shared source
// only. Without that folder, the sets skip kargo saying why (and build the
// rest), and `hack/substrate.sh kargo`, which asks for it by name, fails;
// with it, kargo is planned for a build with its cold estimate. `env` names
// its cache directory either way, as for every tool.
func TestSubstrateKargoNeedsItsSource(t *testing.T) {
	tmp := t.TempDir()
	cache := filepath.Join(tmp, "cache")
	none := filepath.Join(tmp, "no-kargo-src")
	env := cleanEnv(t, "STACKFLOW_CACHE="+cache, "XDG_DATA_HOME="+filepath.Join(tmp, "share"), "STACKFLOW_KARGO_SRC="+none)

	for _, set := range []string{"demo", "all"} {
		plan, _ := substrateSh(t, env, "plan", set)
		if want := "kargo          skipped: no Kargo source at " + none; !strings.Contains(plan, want) {
			t.Errorf("plan %s lacks %q:\n%s", set, want, plan)
		}
		if regexp.MustCompile(`building .*\bkargo\b`).MatchString(plan) {
			t.Errorf("plan %s would build kargo without its source:\n%s", set, plan)
		}
	}
	cmd := exec.Command(filepath.Join(RepoRoot(), "hack", "substrate.sh"), "kargo")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "kargo: skipped, no Kargo source at "+none) {
		t.Errorf("hack/substrate.sh kargo without the source: %v, want a failure saying why:\n%s", err, out)
	}
	// Its cache directory: kargo-<version>-<digest of hack/tools/kargo>.
	dirOut, _ := substrateSh(t, env, "dir", "kargo")
	kargoDir := strings.TrimSpace(dirOut)
	if !regexp.MustCompile(`^` + regexp.QuoteMeta(filepath.Join(cache, "kargo-v1.11.2-")) + `[0-9a-f]{8}$`).MatchString(kargoDir) {
		t.Errorf("dir kargo = %q, want %s-<digest of its tools module>", kargoDir, filepath.Join(cache, "kargo-v1.11.2"))
	}
	if _, err := os.Stat(kargoDir + ".tmp"); err == nil {
		t.Error("hack/substrate.sh kargo started a build without the source")
	}

	exports, _ := substrateSh(t, env, "env")
	if want := "export STACKFLOW_KARGO=" + kargoDir + "\n"; !strings.Contains(exports, want) {
		t.Errorf("env lacks %q:\n%s", want, exports)
	}
	p, err := locate(env)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kargo != kargoDir {
		t.Errorf("Locate().Kargo = %s, want the cache's %s", p.Kargo, kargoDir)
	}

	src := KargoSource()
	if _, err := os.Stat(filepath.Join(src, "go.mod")); err != nil {
		t.Logf("no Kargo source at %s: the planned build is not checked", src)
		return
	}
	plan, _ := substrateSh(t, cleanEnv(t, "STACKFLOW_CACHE="+cache, "STACKFLOW_KARGO_SRC="+src), "plan", "kargo")
	if !regexp.MustCompile(`kargo +to build \(~[0-9]+ min cold\): ` + regexp.QuoteMeta(kargoDir) + `\n`).MatchString(plan) {
		t.Errorf("plan kargo with the source lacks its build with a cold estimate:\n%s", plan)
	}
}

// TestSubstrateChainsKeepAlignedToolsTogether: with nothing cached, `plan all`
// deals the builds to two chains, and puts Argo CD v3, Argo Rollouts and Kargo,
// whose tools modules select the same dependency versions
// (hack/gen-tools-argo-kargo.sh), in one chain, so that the Go build cache
// compiles what they share once instead of in both chains at the same time;
// kube-apiserver and pulumi (unless installed on the machine, then not built)
// go to the other.
func TestSubstrateChainsKeepAlignedToolsTogether(t *testing.T) {
	tmp := t.TempDir()
	env := cleanEnv(t, "STACKFLOW_CACHE="+filepath.Join(tmp, "cache"), "XDG_DATA_HOME="+filepath.Join(tmp, "share"),
		"STACKFLOW_KARGO_SRC="+KargoSource())
	plan, _ := substrateSh(t, env, "plan", "all")
	m := regexp.MustCompile(`(?m)^  chains: (.*) \| (.*)$`).FindStringSubmatch(plan)
	if m == nil {
		t.Fatalf("plan all prints no chains:\n%s", plan)
	}
	chainOf := map[string]int{}
	for i, chain := range m[1:] {
		for _, tool := range strings.Fields(chain) {
			chainOf[tool] = i
		}
	}
	if _, err := os.Stat(filepath.Join(KargoSource(), "go.mod")); err != nil {
		t.Logf("no Kargo source at %s: only Argo CD and Rollouts are checked", KargoSource())
		delete(chainOf, "kargo")
	}
	for _, tool := range []string{"argocd3", "rollouts"} {
		if _, ok := chainOf[tool]; !ok {
			t.Errorf("%s is in neither chain: %q", tool, m[0])
		}
	}
	for _, tool := range []string{"rollouts", "kargo"} {
		if c, ok := chainOf[tool]; ok && c != chainOf["argocd3"] {
			t.Errorf("%s is not in argocd3's chain: %q", tool, m[0])
		}
	}
	for _, tool := range []string{"kube", "pulumi"} {
		if c, ok := chainOf[tool]; ok && c == chainOf["argocd3"] {
			t.Errorf("%s is in argocd3's chain: %q", tool, m[0])
		}
	}
}

// TestSubstrateBuildsKargoFromAnotherFolder: where STACKFLOW_KARGO_SRC names
// a Kargo source other than the shared folder the Kargo tools module points
// at, hack/substrate.sh builds from that folder (through a copy of the
// module's go.mod given to go build with -modfile), leaves the tools module
// as committed, and takes the CRDs from beside that source. The build
// compiles nothing new with a warm Go build cache (-trimpath keeps the
// folder out of the compiled packages); it relinks.
func TestSubstrateBuildsKargoFromAnotherFolder(t *testing.T) {
	src := KargoSource()
	if _, err := os.Stat(filepath.Join(src, "go.mod")); err != nil {
		t.Skipf("no Kargo source at %s", src)
	}
	tmp := t.TempDir()
	other := filepath.Join(tmp, "kargo")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{src, filepath.Join(src, "..", "crds")} {
		if out, err := exec.Command("cp", "-r", d, other).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v\n%s", err, out)
		}
	}
	// The shared folder is read-only; the copy must be removable.
	if out, err := exec.Command("chmod", "-R", "u+w", other).CombinedOutput(); err != nil {
		t.Fatalf("chmod: %v\n%s", err, out)
	}
	otherSrc := filepath.Join(other, filepath.Base(src))
	modPath := filepath.Join(RepoRoot(), "hack", "tools", "kargo", "go.mod")
	before, err := os.ReadFile(modPath)
	if err != nil {
		t.Fatal(err)
	}
	env := cleanEnv(t, "STACKFLOW_CACHE="+filepath.Join(tmp, "cache"), "STACKFLOW_KARGO_SRC="+otherSrc)
	_, stderr := substrateSh(t, env, "kargo")
	if !strings.Contains(stderr, "go build kargo") {
		t.Fatalf("hack/substrate.sh kargo did not build Kargo:\n%s", stderr)
	}
	dirOut, _ := substrateSh(t, env, "dir", "kargo")
	dir := strings.TrimSpace(dirOut)
	for _, f := range []string{"kargo", "credential-helper", ".complete"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the build left no %s: %v", f, err)
		}
	}
	for _, f := range []string{"kargo.mod", "kargo.sum"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("the build left its %s in the cache", f)
		}
	}
	crds, _ := filepath.Glob(filepath.Join(dir, "crds", "*.yaml"))
	if len(crds) == 0 {
		t.Error("no CRDs copied from beside the source")
	}
	info, err := exec.Command("go", "version", "-m", filepath.Join(dir, "kargo")).Output()
	if err != nil {
		t.Fatal(err)
	}
	// go version -m: "mod github.com/akuity/kargo v0.0.0", then "=> DIR (devel)".
	replaced := regexp.MustCompile(`(?m)^\s*=>\s+` + regexp.QuoteMeta(otherSrc) + `\s`)
	if !replaced.Match(info) {
		t.Errorf("kargo was not built from %s (go version -m lacks its replace):\n%.600s", otherSrc, info)
	}
	after, err := os.ReadFile(modPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Error("the build changed hack/tools/kargo/go.mod")
	}
}
