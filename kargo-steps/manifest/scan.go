package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"
)

// Target names the Stack to edit. Namespace may be empty: it then matches a
// Stack in any namespace (or in none); a manifest without a namespace matches
// any target namespace.
type Target struct {
	Name      string
	Namespace string
}

func (t Target) String() string {
	if t.Namespace == "" {
		return t.Name
	}
	return t.Namespace + "/" + t.Name
}

// Skipped is a file that was not looked at because it does not parse as YAML
// and does not mention a Stack.
type Skipped struct {
	File string // slash-separated, relative to dir
	Err  string // the parser's message
}

// file is one parsed .yaml/.yml file.
type file struct {
	rel  string // slash-separated, relative to the walked directory
	path string // path on disk
	mode fs.FileMode
	data []byte
	li   *lineIndex
	docs []*yaml.Node // document nodes, in order
}

// stack is one Stack document found in a file.
type stack struct {
	f         *file
	doc       int        // 0-based document index
	root      *yaml.Node // the document's mapping
	name      string
	namespace string
}

func (s *stack) describe() string {
	who := s.name
	if s.namespace != "" {
		who = s.namespace + "/" + s.name
	}
	if who == "" {
		who = "(no metadata.name)"
	}
	return fmt.Sprintf("%s (%s, document %d)", who, s.f.rel, s.doc+1)
}

// mayHoldStack reports whether bytes that do not parse could still hold a
// Stack manifest.
var stackKind = regexp.MustCompile(`\bStack\b`)

func mayHoldStack(data []byte) bool {
	return bytes.Contains(data, []byte("pulumi.com")) && stackKind.Match(data)
}

// scan walks dir and returns its Stack manifests, in walk (lexical) order.
func scan(dir string) ([]*stack, []Skipped, error) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("reading manifests directory: %w", err)
	}
	info, err := os.Stat(root)
	if err != nil {
		return nil, nil, fmt.Errorf("reading manifests directory: %w", err)
	}
	if !info.IsDir() {
		return nil, nil, fmt.Errorf("manifests directory %s is not a directory: pass the directory holding the Stack manifests", dir)
	}
	var stacks []*stack
	var skipped []Skipped
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() { // symbolic links, devices, sockets
			return nil
		}
		ext := strings.ToLower(filepath.Ext(d.Name()))
		if ext != ".yaml" && ext != ".yml" {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f := &file{rel: rel, path: path, mode: info.Mode(), data: data}
		docs, perr := parseDocs(data)
		if perr != nil {
			if mayHoldStack(data) {
				return &inputError{fmt.Errorf("%s does not parse (%w) and may hold a Stack: fix its YAML, or move it out of %s", rel, perr, dir)}
			}
			skipped = append(skipped, Skipped{File: rel, Err: perr.Error()})
			return nil
		}
		f.docs = docs
		found := stacksIn(f)
		if len(found) > 0 {
			if utf16BOM(data) {
				return &inputError{fmt.Errorf("%s holds a Stack but is UTF-16: re-encode it as UTF-8", rel)}
			}
			f.li = newLineIndex(data)
		}
		stacks = append(stacks, found...)
		return nil
	})
	var ie *inputError
	if errors.As(err, &ie) {
		return nil, nil, ie.err
	}
	if err != nil {
		return nil, nil, fmt.Errorf("walking %s: %w", dir, err)
	}
	return stacks, skipped, nil
}

// inputError is a problem with a manifest, returned by scan as it is.
type inputError struct{ err error }

func (e *inputError) Error() string { return e.err.Error() }

func utf16BOM(data []byte) bool {
	return bytes.HasPrefix(data, []byte{0xFE, 0xFF}) || bytes.HasPrefix(data, []byte{0xFF, 0xFE})
}

// parseDocs parses every document of data.
func parseDocs(data []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if n.Kind != yaml.DocumentNode {
			return nil, fmt.Errorf("document %d: unexpected node kind %v", len(docs)+1, n.Kind)
		}
		docs = append(docs, &n)
	}
}

// stacksIn returns the Stack documents of f.
func stacksIn(f *file) []*stack {
	var out []*stack
	for i, d := range f.docs {
		root := docRoot(d)
		if root == nil || !isStack(root) {
			continue
		}
		s := &stack{f: f, doc: i, root: root}
		if _, md := get(root, "metadata"); md != nil && md.Kind == yaml.MappingNode {
			s.name = scalar(md, "name")
			s.namespace = scalar(md, "namespace")
		}
		out = append(out, s)
	}
	return out
}

func docRoot(d *yaml.Node) *yaml.Node {
	if d == nil || len(d.Content) == 0 {
		return nil
	}
	r := d.Content[0]
	if r.Kind != yaml.MappingNode {
		return nil
	}
	return r
}

// isStack reports whether the mapping m is a Stack of the pulumi.com group,
// any version.
func isStack(m *yaml.Node) bool {
	group, _, ok := strings.Cut(scalar(m, "apiVersion"), "/")
	return ok && group == "pulumi.com" && scalar(m, "kind") == "Stack"
}

// get returns the first key and value nodes of key in the mapping m (aliases
// resolved for the value), or nils.
func get(m *yaml.Node, key string) (k, v *yaml.Node) {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if kn := m.Content[i]; kn.Kind == yaml.ScalarNode && kn.Value == key {
			v := m.Content[i+1]
			for j := 0; v.Kind == yaml.AliasNode && v.Alias != nil && j < 100; j++ {
				v = v.Alias
			}
			return kn, v
		}
	}
	return nil, nil
}

// pairs returns the indexes (into m.Content) of every key named key.
func pairs(m *yaml.Node, key string) []int {
	var out []int
	for i := 0; i+1 < len(m.Content); i += 2 {
		if kn := m.Content[i]; kn.Kind == yaml.ScalarNode && kn.Value == key {
			out = append(out, i)
		}
	}
	return out
}

func scalar(m *yaml.Node, key string) string {
	_, v := get(m, key)
	if v == nil || v.Kind != yaml.ScalarNode {
		return ""
	}
	return v.Value
}

// lineIndex maps the parser's positions (1-based line, 1-based column counted
// in characters) to byte offsets. Line breaks are what the parser counts as
// line breaks: CRLF, CR, LF, NEL, LS and PS. A leading UTF-8 BOM is not part of
// line 1's columns.
type lineIndex struct {
	data   []byte
	starts []int // byte offset where each line starts
	ends   []int // byte offset where each line's content ends (its break starts)
}

func newLineIndex(data []byte) *lineIndex {
	li := &lineIndex{data: data}
	i := 0
	if bytes.HasPrefix(data, []byte("\xEF\xBB\xBF")) {
		i = 3
	}
	li.starts = append(li.starts, i)
	for i < len(data) {
		n := breakLen(data, i)
		if n == 0 {
			i++
			continue
		}
		li.ends = append(li.ends, i)
		i += n
		li.starts = append(li.starts, i)
	}
	li.ends = append(li.ends, len(data))
	return li
}

// breakLen returns the length of the line break at data[i:], or 0.
func breakLen(data []byte, i int) int {
	switch {
	case data[i] == '\r':
		if i+1 < len(data) && data[i+1] == '\n' {
			return 2
		}
		return 1
	case data[i] == '\n':
		return 1
	case data[i] == 0xC2 && i+1 < len(data) && data[i+1] == 0x85:
		return 2
	case data[i] == 0xE2 && i+2 < len(data) && data[i+1] == 0x80 && (data[i+2] == 0xA8 || data[i+2] == 0xA9):
		return 3
	}
	return 0
}

// offset returns the byte offset of the parser position (line, col).
func (li *lineIndex) offset(line, col int) (int, bool) {
	if line < 1 || line > len(li.starts) || col < 1 {
		return 0, false
	}
	off, end := li.starts[line-1], li.ends[line-1]
	for c := 1; c < col; c++ {
		if off >= end {
			return 0, false
		}
		_, size := utf8.DecodeRune(li.data[off:end])
		off += size
	}
	return off, true
}

// lineOf returns the 1-based line holding byte offset off.
func (li *lineIndex) lineOf(off int) int {
	return sort.Search(len(li.starts), func(i int) bool { return li.starts[i] > off })
}

// nextLineStart returns the offset where the line after line (1-based) starts,
// or len(data) for the last line.
func (li *lineIndex) nextLineStart(line int) int {
	if line < len(li.starts) {
		return li.starts[line]
	}
	return len(li.data)
}

// docSpans splits data into the byte ranges of its documents, using the
// parser's document start positions: document i runs from the start of the
// line where it starts (its "---" when explicit) to where document i+1
// starts; the first starts at 0 and the last ends at the end of data.
func docSpans(li *lineIndex, docs []*yaml.Node) ([][2]int, error) {
	spans := make([][2]int, len(docs))
	for i, d := range docs {
		start := 0
		if i > 0 {
			if d.Line < 1 || d.Line > len(li.starts) {
				return nil, fmt.Errorf("document %d starts at line %d, past the end of the file", i+1, d.Line)
			}
			start = li.starts[d.Line-1]
			if start < spans[i-1][0] {
				return nil, fmt.Errorf("document %d starts before document %d", i+1, i)
			}
			spans[i-1][1] = start
		}
		spans[i] = [2]int{start, len(li.data)}
	}
	return spans, nil
}
