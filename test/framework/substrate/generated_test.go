package substrate

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratorsSkipWhenNothingChanged runs a generator built on
// hack/generated.sh (as gen-proto.sh and the gen-tools scripts are) in a copy
// of the repository's layout, and checks when it does its work: the first
// time; not again while its parameters, inputs and outputs are unchanged; again
// after an input is edited, after a parameter changes, after its output is
// edited by hand (which it restores), and with GENERATE_FORCE=1.
func TestGeneratorsSkipWhenNothingChanged(t *testing.T) {
	root := t.TempDir()
	lib, err := os.ReadFile(filepath.Join(RepoRoot(), "hack", "generated.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"hack/generated.sh": string(lib),
		// gen.sh writes out/result.txt from in/input.txt and VERSION, and
		// counts its runs in runs.txt (not one of its outputs).
		"hack/gen.sh": `#!/usr/bin/env bash
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/generated.sh"
VERSION=${VERSION:-v1}
GEN_PARAMS=("VERSION=$VERSION")
GEN_INPUTS=(hack/gen.sh in/input.txt)
GEN_OUTPUTS=(out/result.txt)
generated_fresh out/generated.sha256 && exit 0
mkdir -p "$GEN_ROOT/out"
{ echo "$VERSION"; cat "$GEN_ROOT/in/input.txt"; } > "$GEN_ROOT/out/result.txt"
echo run >> "$GEN_ROOT/runs.txt"
generated_record out/generated.sha256
`,
		"in/input.txt": "one\n",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	runs := 0
	gen := func(why string, wantRun bool, env ...string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(root, "hack", "gen.sh"))
		cmd.Env = append(cleanEnv(t), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: hack/gen.sh: %v\n%s", why, err, out)
		}
		if wantRun {
			runs++
		}
		b, _ := os.ReadFile(filepath.Join(root, "runs.txt"))
		if got := strings.Count(string(b), "run"); got != runs {
			t.Fatalf("%s: the generator ran %d times in all, want %d; it said:\n%s", why, got, runs, out)
		}
		if !wantRun && !strings.Contains(string(out), "out/generated.sha256: inputs and outputs match; not regenerated") {
			t.Errorf("%s: a skipped generation does not say why:\n%s", why, out)
		}
	}
	result := func() string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, "out", "result.txt"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	gen("first run", true)
	gen("nothing changed", false)
	gen("nothing changed, again", false)
	write("in/input.txt", "two\n")
	gen("an input edited", true)
	if got := result(); got != "v1\ntwo\n" {
		t.Fatalf("result after the input changed: %q", got)
	}
	gen("a parameter changed", true, "VERSION=v2")
	gen("the same parameter", false, "VERSION=v2")
	write("out/result.txt", "edited by hand\n")
	gen("the output edited by hand", true, "VERSION=v2")
	if got := result(); got != "v2\ntwo\n" {
		t.Fatalf("the output edited by hand was not restored: %q", got)
	}
	if err := os.Remove(filepath.Join(root, "out", "result.txt")); err != nil {
		t.Fatal(err)
	}
	gen("the output deleted", true, "VERSION=v2")
	gen("GENERATE_FORCE=1", true, "VERSION=v2", "GENERATE_FORCE=1")

	// The digest names files relative to the root: the same tree elsewhere
	// is as fresh.
	moved := filepath.Join(t.TempDir(), "elsewhere")
	if out, err := exec.Command("cp", "-a", root, moved).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	root = moved
	gen("the same tree at another path", false, "VERSION=v2")
}
