package manifest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"
)

// FuzzSetCommit edits arbitrary file contents. Whenever SetCommit succeeds:
// (a) the result parses, (b) every document but the edited one is byte for
// byte unchanged, (c) the edited Stack has spec.commit set to the SHA and no
// spec.branch, (d) a second SetCommit reports Changed false and leaves the
// bytes as they are. When it fails, the file is untouched. It never panics.
func FuzzSetCommit(f *testing.F) {
	syncWrites = false
	f.Cleanup(func() { syncWrites = true })
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("apiVersion: pulumi.com/v1\nkind: Stack\nmetadata: {name: x}\nspec:\n  commit: !!str &a 'x'\n  branch: |\n    main\n"))
	f.Add([]byte("apiVersion: pulumi.com/v1\r\nkind: Stack\r\nmetadata:\r\n  name: x\r\nspec:\r\n  branch: \"ma\\\"in\" # c\r\n  commit:\r\n"))
	for _, s := range []string{
		"apiVersion: pulumi.com/v1\nkind: Stack\nmetadata:\n  name: x\nspec:\n  \"commit\":\tabc\n  branch:\n    main\n  stack: dev\n",
		"--- # c\napiVersion: pulumi.com/v1\nkind: Stack\nmetadata:\n  name: x\nspec:   # c\n  # head\n  stack: dev\n...\n--- |\n  text\n",
		"apiVersion: pulumi.com/v1\nkind: Stack\nmetadata:\n  name: x\nspec:\n  commit:\n    0123456789abcdef0123456789abcdef01234567\n  ? branch\n  : main\n",
		"apiVersion: pulumi.com/v1\u2028kind: Stack\u2028metadata:\u2028  name: x\u2028spec:\u2028  branch: main\u2028",
		"a: b\n...\n%YAML 1.1\n---\napiVersion: pulumi.com/v1\nkind: Stack\nmetadata:\n  name: app\nspec:\n  branch: main\n...\n%TAG ! tag:x,2000:\n--- !x\nc: d\n",
		"apiVersion: pulumi.com/v1\nkind: Stack\nmetadata:\n  name: app\nspec:\n  branch: main\n--- |\n  spec:\n  branch: x\n",
		"a: &a b\n---\napiVersion: pulumi.com/v1\nkind: Stack\nmetadata:\n  name: x\nspec:\n  commit: \"01\\\n   23\"\n  branch: 'it''s' # c\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(checkSetCommit)
}

// checkSetCommit runs SetCommit on data and checks the properties FuzzSetCommit
// states; it reports whether SetCommit succeeded.
func checkSetCommit(t *testing.T, data []byte) {
	t.Helper()
	_ = checkSetCommitOK(t, data)
}

func checkSetCommitOK(t *testing.T, data []byte) bool {
	t.Helper()
	{
		dir := t.TempDir()
		path := filepath.Join(dir, "m.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		target := Target{Name: "app"}
		if docs, err := parseDocs(data); err == nil {
			if ss := stacksIn(&file{docs: docs}); len(ss) > 0 && ss[0].name != "" {
				target = Target{Name: ss[0].name, Namespace: ss[0].namespace}
			}
		}
		res, err := SetCommit(dir, target, newSHA)
		out, rerr := os.ReadFile(path)
		if rerr != nil {
			t.Fatal(rerr)
		}
		if err != nil {
			if !bytes.Equal(out, data) {
				t.Fatalf("SetCommit failed (%v) but changed the file", err)
			}
			return false
		}
		if !res.Changed && !bytes.Equal(out, data) {
			t.Fatalf("Changed false but the file changed")
		}
		// (a)
		oldDocs, _ := parseDocs(data)
		newDocs, err := parseDocs(out)
		if err != nil {
			t.Fatalf("the result does not parse: %v\n%q", err, out)
		}
		// (b)
		if len(oldDocs) != len(newDocs) {
			t.Fatalf("%d documents before, %d after", len(oldDocs), len(newDocs))
		}
		oldSpans, err := docSpans(newLineIndex(data), oldDocs)
		if err != nil {
			t.Fatal(err)
		}
		newSpans, err := docSpans(newLineIndex(out), newDocs)
		if err != nil {
			t.Fatal(err)
		}
		edited := res.Document - 1
		for i := range oldSpans {
			o, n := data[oldSpans[i][0]:oldSpans[i][1]], out[newSpans[i][0]:newSpans[i][1]]
			if i != edited && !bytes.Equal(o, n) {
				t.Fatalf("document %d changed:\n%q\n%q", i+1, o, n)
			}
		}
		if !bytes.Equal(data[:oldSpans[edited][0]], out[:newSpans[edited][0]]) {
			t.Fatalf("the bytes before the edited document changed")
		}
		// (c)
		root := docRoot(newDocs[edited])
		if root == nil || !isStack(root) {
			t.Fatalf("document %d is no longer a Stack", res.Document)
		}
		_, spec := get(root, "spec")
		if _, c := get(spec, "commit"); c == nil || c.Kind != yaml.ScalarNode || c.Value != newSHA || c.ShortTag() != "!!str" {
			t.Fatalf("spec.commit is %+v, want %s", c, newSHA)
		}
		if len(pairs(spec, "branch")) != 0 {
			t.Fatalf("spec.branch is still there")
		}
		// (d)
		again, err := SetCommit(dir, target, newSHA)
		if err != nil {
			t.Fatalf("second SetCommit: %v", err)
		}
		if again.Changed {
			t.Fatalf("second SetCommit changed the file")
		}
		if b, _ := os.ReadFile(path); !bytes.Equal(b, out) {
			t.Fatalf("second SetCommit changed the bytes")
		}
	}
	return true
}

// TestSetCommitCombinations composes Stack documents from the shapes found in
// real manifests (commit and branch present or not, plain or quoted, with
// comments; 2- or 4-space indentation; LF or CRLF; other documents before and
// after) and checks every one as FuzzSetCommit does; all of them must succeed.
func TestSetCommitCombinations(t *testing.T) {
	syncWrites = false
	t.Cleanup(func() { syncWrites = true })
	commits := []string{"", "commit: " + oldSHA, "commit: \"" + oldSHA + "\" # c", "commit: '" + oldSHA + "'", "commit:", "commit: # empty", "commit: " + newSHA}
	branches := []string{"", "branch: main", "branch: \"main\" # tracked", "# head\nbranch: main\n# foot"}
	others := []string{"stack: dev", "projectRepo: https://github.com/example/infra\nenvRefs:\n  A:\n    type: Env"}
	program := "apiVersion: pulumi.com/v1\nkind: Program\nmetadata:\n  name: p\nprogram:\n  resources: {}\n"
	n := 0
	for _, c := range commits {
		for _, b := range branches {
			for oi, o := range others {
				for _, indent := range []string{"  ", "    "} {
					order := []string{o, b, c}
					if oi == 1 {
						order = []string{c, o, b}
					}
					var spec []string
					for _, part := range order {
						if part != "" {
							spec = append(spec, part)
						}
					}
					if len(spec) == 0 {
						continue
					}
					body := strings.ReplaceAll(strings.Join(spec, "\n"), "\n", "\n"+indent)
					stack := "apiVersion: pulumi.com/v1\nkind: Stack\nmetadata:\n" + indent + "name: app\nspec:\n" + indent + body + "\n"
					for _, layout := range []string{"%s", "%s---\n" + program, program + "---\n%s", "---\n" + program + "---\n%s---\n" + program} {
						for _, eol := range []string{"\n", "\r\n"} {
							data := strings.ReplaceAll(fmt.Sprintf(layout, stack), "\n", eol)
							if !checkSetCommitOK(t, []byte(data)) {
								t.Errorf("SetCommit failed on\n%s", data)
							}
							n++
						}
					}
				}
			}
		}
	}
	t.Logf("%d combinations", n)
}

// FuzzSetCommitSpec fuzzes only the body of spec, inside a valid Stack in a
// multi-document file, so that more inputs reach the edit; the properties are
// FuzzSetCommit's.
func FuzzSetCommitSpec(f *testing.F) {
	syncWrites = false
	f.Cleanup(func() { syncWrites = true })
	for _, s := range []string{
		"  commit: " + oldSHA + " # c\n  branch: main\n",
		"  # head\n  branch: \"main\" # c\n  # foot\n\n  stack: dev\n",
		"    stack: dev\n    envRefs:\n      A: {type: Env}\n",
		"  commit: '" + oldSHA + "'\n  ? x\n  : y\n",
		"  commit:\n  branch:\n",
	} {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(7))
	}
	program := "apiVersion: pulumi.com/v1\nkind: Program\nmetadata:\n  name: p\nprogram:\n  resources: {}\n"
	f.Fuzz(func(t *testing.T, spec []byte, shape uint8) {
		stack := "apiVersion: pulumi.com/v1\nkind: Stack\nmetadata:\n  name: app\nspec:\n" + string(spec)
		var data string
		switch shape % 4 {
		case 0:
			data = stack
		case 1:
			data = program + "---\n" + stack
		case 2:
			data = stack + "\n---\n" + program
		case 3:
			data = "---\n" + program + "---\n" + stack + "\n...\n---\n" + program
		}
		if shape&4 != 0 {
			data = strings.ReplaceAll(data, "\n", "\r\n")
		}
		checkSetCommit(t, []byte(data))
	})
}
