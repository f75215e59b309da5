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

// TestNoForgedCommands: whatever a message holds (text from a pull request:
// a Stack's name, a project's name, an error quoting a manifest), each call
// writes exactly the one command it is for, and Info none.
func TestNoForgedCommands(t *testing.T) {
	hostile := []string{
		"web\n::error::forged",
		"web\r::stop-commands::pwned",
		"web\r\n  ::add-mask::success",
		"::error title=x::forged",
		"  ::warning::forged",
		"\u00a0::notice::forged",
		"##[error]forged",
		" \t##[set-output name=x]forged",
		"%0A::error::already escaped",
		"dev/web\n##[group]forged\n::endgroup::",
	}
	for _, msg := range hostile {
		for _, tt := range []struct {
			name  string
			write func(*bytes.Buffer)
			want  []string
		}{
			{"Info", func(b *bytes.Buffer) { Info(b, msg) }, nil},
			{"Info with a prefix", func(b *bytes.Buffer) { Info(b, "Result "+msg) }, nil},
			{"Warning", func(b *bytes.Buffer) { Warning(b, msg) }, []string{"warning"}},
			{"Error", func(b *bytes.Buffer) { Error(b, msg) }, []string{"error"}},
		} {
			var b bytes.Buffer
			tt.write(&b)
			var got []string
			for _, c := range Commands(b.String()) {
				got = append(got, c.Name)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("%s(%q) wrote commands %v, want %v:\n%s", tt.name, msg, got, tt.want, b.String())
			}
			if strings.Count(b.String(), "\n") != 1 || strings.Contains(b.String(), "\r") {
				t.Errorf("%s(%q) wrote more than one line: %q", tt.name, msg, b.String())
			}
		}
	}
	// The text stays readable: the escapes are the runner's own.
	var b bytes.Buffer
	Info(&b, "::error::x")
	if b.String() != "%3A:error::x\n" {
		t.Errorf("Info wrote %q", b.String())
	}
}
