package manifest

import (
	"bytes"
	"os"
	"path/filepath"
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
		"a: &a b\n---\napiVersion: pulumi.com/v1\nkind: Stack\nmetadata:\n  name: x\nspec:\n  commit: \"01\\\n   23\"\n  branch: 'it''s' # c\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
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
			return
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
	})
}
