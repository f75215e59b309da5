package argocd

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestLocateWithoutEnvironment finds each version's build where
// `hack/substrate.sh dir` says it is with no STACKFLOW_ARGOCD* variable set
// (as `make demo` run by hand has none), and checks that the variable, when
// set, overrides it and that an incomplete build is refused with the command
// that builds it.
func TestLocateWithoutEnvironment(t *testing.T) {
	for _, v := range Versions {
		t.Run(string(v), func(t *testing.T) {
			t.Setenv(v.EnvDir(), "")
			out, err := exec.Command(filepath.Join(substrate.RepoRoot(), "hack", "substrate.sh"), "dir", v.tool()).Output()
			if err != nil {
				t.Fatal(err)
			}
			want := strings.TrimSpace(string(out))
			b := LocateOrSkip(t, v)
			if b.Binary != filepath.Join(want, "argocd") || !strings.HasPrefix(b.Version, "v"+string(v)) {
				t.Errorf("Locate(%s) = %+v, want the build in %s", v, b, want)
			}

			// The variable overrides: a complete build elsewhere is taken,
			// an incomplete one refused.
			other := t.TempDir()
			t.Setenv(v.EnvDir(), other)
			if _, err := Locate(v); err == nil || !strings.Contains(err.Error(), "./hack/substrate.sh "+v.tool()) {
				t.Errorf("Locate(%s) of an empty %s: %v, want an error naming ./hack/substrate.sh %s", v, other, err, v.tool())
			}
			for _, f := range []string{".complete", "argocd", "argocd-cm.yaml", "crds/application-crd.yaml"} {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(other, f)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(other, f), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(other, "VERSION"), []byte("v9.9.9\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if b, err := Locate(v); err != nil || b.Binary != filepath.Join(other, "argocd") || b.Version != "v9.9.9" {
				t.Errorf("Locate(%s) with %s=%s: %+v, %v; want that build", v, v.EnvDir(), other, b, err)
			}
		})
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]Version{"3": V3, "v3": V3, "2.14": V2, "v2.14": V2} {
		if got, err := ParseVersion(in); err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "2", "3.6", "v2.13"} {
		if _, err := ParseVersion(in); err == nil {
			t.Errorf("ParseVersion(%q) accepted", in)
		}
	}
}
