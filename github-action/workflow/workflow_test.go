package workflow

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The heredoc format as the runner parses it: name<<D, lines, D.
func parseOutputs(t *testing.T, s string) map[string]string {
	t.Helper()
	out := map[string]string{}
	lines := strings.Split(s, "\n")
	for i := 0; i < len(lines); i++ {
		if lines[i] == "" {
			continue
		}
		name, delim, ok := strings.Cut(lines[i], "<<")
		if !ok {
			t.Fatalf("line %q is not name<<delimiter", lines[i])
		}
		var val []string
		for i++; lines[i] != delim; i++ {
			val = append(val, lines[i])
		}
		out[name] = strings.Join(val, "\n")
	}
	return out
}

func TestSetOutputs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "output")
	changes := `[{"stack":"dev","create":1}]` + "\nsecond line"
	if err := SetOutputs(path, [][2]string{{"changes", changes}, {"has-changes", "true"}}); err != nil {
		t.Fatal(err)
	}
	if err := SetOutputs(path, [][2]string{{"comment-url", "https://github.com/o/r/pull/1#issuecomment-1"}}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	got := parseOutputs(t, string(b))
	if got["changes"] != changes || got["has-changes"] != "true" || got["comment-url"] == "" {
		t.Fatalf("outputs %v", got)
	}
	if SetOutputs("", [][2]string{{"x", "y"}}) != nil {
		t.Fatal("no path must do nothing")
	}
}

func TestCommands(t *testing.T) {
	var b bytes.Buffer
	Warning(&b, "fork PR: 100% read-only\ntoken")
	Mask(&b, "s3cret\nline2\n")
	want := "::warning::fork PR: 100%25 read-only%0Atoken\n::add-mask::s3cret\n::add-mask::line2\n"
	if b.String() != want {
		t.Fatalf("got %q", b.String())
	}
}
