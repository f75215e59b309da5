// Package docs holds Stackflow's documentation beyond the README, and a test
// that keeps every relative link of every Markdown file in the repository
// pointing at a file and heading that exist.
package docs

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// markdownLink matches an inline link's target: [text](target).
var markdownLink = regexp.MustCompile(`\]\(([^()\s]+)\)`)

// TestRelativeLinksResolve: each relative link of the repository's Markdown
// files names an existing file, and each #anchor a heading of its target (as
// GitHub derives anchors from headings). Links to other sites are not
// checked (no network here).
func TestRelativeLinksResolve(t *testing.T) {
	root := repoRoot(t)
	out, err := exec.Command("git", "-C", root, "ls-files", "*.md").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	files := strings.Fields(string(out))
	if len(files) < 5 {
		t.Fatalf("found only %d Markdown files", len(files))
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a, err := headingAnchors(path)
		if err != nil {
			t.Fatal(err)
		}
		anchors[path] = a
		return a
	}
	checked := 0
	for _, f := range files {
		if strings.Contains(f, "/testdata/") {
			continue // golden outputs, not documentation
		}
		path := filepath.Join(root, f)
		for _, l := range links(t, path) {
			target := l.target
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := path
			if file != "" {
				dest = filepath.Join(filepath.Dir(path), file)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", f, l.line, target, file)
					continue
				}
			}
			checked++
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if !anchorsOf(dest)[anchor] {
				t.Errorf("%s:%d: link %q: no heading with anchor #%s in %s", f, l.line, target, anchor, filepath.Base(dest))
			}
		}
	}
	t.Logf("%d relative links checked in %d files", checked, len(files))
}

type link struct {
	target string
	line   int
}

// links are the inline link targets of a Markdown file outside code blocks
// and code spans.
func links(t *testing.T, path string) []link {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []link
	fenced := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range markdownLink.FindAllStringSubmatch(withoutCodeSpans(line), -1) {
			out = append(out, link{target: m[1], line: n})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

var codeSpan = regexp.MustCompile("`[^`]*`")

func withoutCodeSpans(line string) string { return codeSpan.ReplaceAllString(line, "") }

// headingAnchors are the anchors GitHub gives a file's headings: lower case,
// punctuation other than '-' and '_' dropped, spaces as '-', a repeated one
// suffixed -1, -2, ….
func headingAnchors(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		a := slug(text)
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out, nil
}

func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && isLetter(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isLetter(r rune) bool { return strings.ToLower(string(r)) != strings.ToUpper(string(r)) }

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(dir) // this package is docs/ at the repository root
}

// TestIndexNamesEveryPage: docs/README.md links every page of docs/, and
// each page opens with its title and a paragraph saying who it is for.
func TestIndexNamesEveryPage(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "docs")
	index, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		name := filepath.Base(p)
		if name == "README.md" {
			continue
		}
		if !strings.Contains(string(index), "]("+name) {
			t.Errorf("docs/README.md does not link %s", name)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(string(b), "\n", 4)
		if len(lines) < 3 || !strings.HasPrefix(lines[0], "# ") || lines[1] != "" || !strings.HasPrefix(lines[2], "For ") {
			t.Errorf("docs/%s does not open with its title and a paragraph beginning \"For …\" (who it is for)", name)
		}
	}
}
