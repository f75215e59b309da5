package manifest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// ErrNoMatch and ErrAmbiguous are wrapped by SetCommit's errors when no Stack,
// or more than one, matches the target.
var (
	ErrNoMatch   = errors.New("no matching Stack")
	ErrAmbiguous = errors.New("several Stacks match")
)

// Result says what SetCommit did.
type Result struct {
	File          string // slash-separated, relative to dir
	Document      int    // 1-based index of the Stack's document in File
	Stack         Target // the Stack's name and namespace as the manifest gives them
	OldCommit     string // spec.commit before the edit ("" when missing or null)
	OldBranch     string // spec.branch before the edit ("" when absent)
	BranchRemoved bool   // spec.branch was removed
	Changed       bool   // the file was rewritten; false when it already had the commit and no branch
	Skipped       []Skipped
}

// SetCommit pins the Stack t in the manifests under dir to the commit sha: it
// sets spec.commit (inserting it when missing) and removes spec.branch, editing
// the file in place and changing no other byte. sha must be a full
// 40-character hexadecimal commit SHA; it is written in lower case.
func SetCommit(dir string, t Target, sha string) (Result, error) {
	sha, err := normalizeSHA(sha)
	if err != nil {
		return Result{}, err
	}
	if t.Name == "" {
		return Result{}, errors.New("no Stack name given: pass the metadata.name of the Stack to pin")
	}
	stacks, skipped, err := scan(dir)
	if err != nil {
		return Result{}, err
	}
	var matches []*stack
	for _, s := range stacks {
		if s.name == t.Name && (t.Namespace == "" || s.namespace == "" || s.namespace == t.Namespace) {
			matches = append(matches, s)
		}
	}
	switch {
	case len(matches) == 0:
		if len(stacks) == 0 {
			return Result{Skipped: skipped}, fmt.Errorf("%w: no Stack %s in %s, and no Stack manifests at all (apiVersion pulumi.com/*, kind Stack, in .yaml or .yml files): check the directory", ErrNoMatch, t, dir)
		}
		return Result{Skipped: skipped}, fmt.Errorf("%w: no Stack %s in %s; Stacks found: %s: check the Stack's name and namespace", ErrNoMatch, t, dir, list(stacks))
	case len(matches) > 1:
		hint := "pass the Stack's namespace to choose one"
		if t.Namespace != "" {
			hint = "give each manifest its metadata.namespace, or pass a directory holding only one of them"
		}
		return Result{Skipped: skipped}, fmt.Errorf("%w: %d Stacks named %s in %s: %s: %s", ErrAmbiguous, len(matches), t, dir, list(matches), hint)
	}
	s := matches[0]
	res := Result{
		File:     s.f.rel,
		Document: s.doc + 1,
		Stack:    Target{Name: s.name, Namespace: s.namespace},
		Skipped:  skipped,
	}
	out, info, err := edit(s, sha)
	if err != nil {
		return res, fmt.Errorf("%s: Stack %s (document %d): %w", s.f.rel, res.Stack, res.Document, err)
	}
	res.OldCommit, res.OldBranch, res.BranchRemoved = info.oldCommit, info.oldBranch, info.branchRemoved
	if out == nil {
		return res, nil
	}
	if err := writeAtomic(s.f.path, out, s.f.mode); err != nil {
		return res, fmt.Errorf("writing %s: %w", s.f.rel, err)
	}
	res.Changed = true
	return res, nil
}

func list(stacks []*stack) string {
	parts := make([]string, len(stacks))
	for i, s := range stacks {
		parts[i] = s.describe()
	}
	return strings.Join(parts, ", ")
}

func normalizeSHA(sha string) (string, error) {
	if len(sha) != 40 || strings.Trim(strings.ToLower(sha), "0123456789abcdef") != "" {
		return "", fmt.Errorf("invalid commit %q: expected a full 40-character hexadecimal commit SHA (git rev-parse HEAD), not a branch, tag or short SHA", sha)
	}
	return strings.ToLower(sha), nil
}

type editInfo struct {
	oldCommit, oldBranch string
	branchRemoved        bool
}

type splice struct {
	start, end int
	text       string
}

// edit computes the new bytes of s's file, or nil when nothing changes.
func edit(s *stack, sha string) ([]byte, editInfo, error) {
	var info editInfo
	f, li, data := s.f, s.f.li, s.f.data
	specKey, spec := get(s.root, "spec")
	switch {
	case spec == nil:
		return nil, info, errors.New("the Stack has no spec: add a spec (projectRepo, commit, ...) to the manifest")
	case spec.Kind == yaml.ScalarNode && spec.ShortTag() == "!!null":
		return nil, info, errors.New("spec is empty: write spec as a block mapping holding the Stack's fields (projectRepo, commit, ...)")
	case spec.Kind != yaml.MappingNode || len(spec.Content) == 0:
		return nil, info, errors.New("spec is not a mapping: write spec as a block mapping holding the Stack's fields")
	case spec.Style&yaml.FlowStyle != 0:
		return nil, info, errors.New("spec is a flow mapping ({...}): write it as a block mapping (one field per line) so that it can be edited without reformatting")
	case len(pairs(s.root, "spec")) > 1:
		return nil, info, errors.New("the Stack has spec more than once: keep one")
	case s.root.Content[pairs(s.root, "spec")[0]+1].Kind == yaml.AliasNode:
		return nil, info, errors.New("spec is an alias: write the Stack's spec out in full")
	}
	if len(pairs(spec, "<<")) > 0 {
		return nil, info, errors.New("spec uses a merge key (<<): write the Stack's spec out in full")
	}
	commits, branches := pairs(spec, "commit"), pairs(spec, "branch")
	if len(commits) > 1 || len(branches) > 1 {
		return nil, info, errors.New("spec has spec.commit or spec.branch more than once: keep one")
	}
	var commitKey, commitVal, branchKey, branchVal *yaml.Node
	if len(commits) == 1 {
		commitKey, commitVal = spec.Content[commits[0]], spec.Content[commits[0]+1]
	}
	if len(branches) == 1 {
		branchKey, branchVal = spec.Content[branches[0]], spec.Content[branches[0]+1]
		info.oldBranch = branchVal.Value
	}
	if commitVal != nil && commitVal.Kind == yaml.ScalarNode && commitVal.ShortTag() == "!!str" {
		info.oldCommit = commitVal.Value
	}
	if branchKey == nil && commitVal != nil && commitVal.Kind == yaml.ScalarNode && commitVal.ShortTag() == "!!str" && commitVal.Value == sha {
		return nil, info, nil
	}

	// The indentation of spec's children.
	first := spec.Content[0]
	firstOff, ok := li.offset(first.Line, first.Column)
	if !ok {
		return nil, info, errPosition("spec's first field")
	}
	indent := data[li.starts[first.Line-1]:firstOff]
	if strings.Trim(string(indent), " ") != "" {
		return nil, info, errors.New("spec's fields are not on lines of their own: write spec as a block mapping, one field per line")
	}

	var edits []splice
	if commitKey != nil {
		e, err := commitEdit(li, commitKey, commitVal, sha)
		if err != nil {
			return nil, info, err
		}
		edits = append(edits, e)
	}
	if branchKey != nil {
		start, end, err := lineSpan(li, branchKey, branchVal)
		if err != nil {
			return nil, info, fmt.Errorf("cannot remove spec.branch: %w", err)
		}
		text := ""
		if commitKey == nil { // the commit takes the branch's place
			brk := data[li.ends[li.lineOf(end-1)-1]:end]
			text = string(indent) + "commit: " + quoteSHA(sha, 0) + string(brk)
		}
		edits = append(edits, splice{start, end, text})
		info.branchRemoved = true
	}
	if commitKey == nil && branchKey == nil {
		if specKey.Line >= first.Line || specKey.Line >= len(li.starts) {
			return nil, info, errors.New("spec's fields do not start on the line after spec: move them there")
		}
		at := li.starts[specKey.Line]
		brk := data[li.ends[specKey.Line-1]:at]
		edits = append(edits, splice{at, at, string(indent) + "commit: " + quoteSHA(sha, 0) + string(brk)})
	}

	spans, err := docSpans(li, f.docs)
	if err != nil {
		return nil, info, fmt.Errorf("cannot locate the file's documents: %w", err)
	}
	span := spans[s.doc]
	sort.Slice(edits, func(i, j int) bool { return edits[i].start > edits[j].start })
	out := append([]byte(nil), data...)
	for i, e := range edits {
		if e.start < span[0] || e.end > span[1] || e.start > e.end || (i > 0 && e.end > edits[i-1].start) {
			return nil, info, errPosition("the edit")
		}
		out = append(out[:e.start:e.start], append([]byte(e.text), out[e.end:]...)...)
	}
	if err := verify(s, out, sha, map[*yaml.Node]bool{commitKey: true, branchKey: true}); err != nil {
		return nil, info, err
	}
	return out, info, nil
}

func errPosition(what string) error {
	return fmt.Errorf("cannot locate %s in the file's bytes: rewrite spec.commit and spec.branch as plain scalars, one per line", what)
}

// commitEdit replaces the value of spec.commit, keeping its quoting style.
func commitEdit(li *lineIndex, key, val *yaml.Node, sha string) (splice, error) {
	switch {
	case val.Kind == yaml.AliasNode:
		return splice{}, fmt.Errorf("spec.commit is an alias (*%s): write the commit itself", val.Value)
	case val.Kind != yaml.ScalarNode:
		return splice{}, errors.New("spec.commit is not a scalar: write it as commit: <sha>")
	case val.Anchor != "":
		return splice{}, fmt.Errorf("spec.commit carries an anchor (&%s): remove the anchor", val.Anchor)
	}
	if val.Style == 0 && val.Value == "" { // commit: (empty)
		colon, err := colonAfter(li, key)
		if err != nil {
			return splice{}, err
		}
		return splice{colon + 1, colon + 1, " " + quoteSHA(sha, 0)}, nil
	}
	start, end, err := scalarSpan(li, val)
	if err != nil {
		return splice{}, fmt.Errorf("cannot edit spec.commit: %w", err)
	}
	return splice{start, end, quoteSHA(sha, val.Style)}, nil
}

// quoteSHA writes sha in the given style; a plain SHA that YAML would read as
// a number is double-quoted.
func quoteSHA(sha string, style yaml.Style) string {
	switch style &^ yaml.TaggedStyle {
	case yaml.DoubleQuotedStyle:
		return `"` + sha + `"`
	case yaml.SingleQuotedStyle:
		return `'` + sha + `'`
	}
	if !plainIsString(sha) {
		return `"` + sha + `"`
	}
	return sha
}

// plainIsString reports whether the hex string s, written plain, is read as a
// string by YAML 1.1 and 1.2 parsers (all digits is an integer, digits with
// one e a float, 0b and binary digits a binary integer).
func plainIsString(s string) bool {
	if !strings.ContainsAny(s, "abcdf") {
		return false
	}
	if strings.HasPrefix(s, "0b") && strings.Trim(s[2:], "01") == "" {
		return false
	}
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(s), &n); err != nil || len(n.Content) != 1 {
		return false
	}
	return n.Content[0].ShortTag() == "!!str"
}

// skipProps returns the offset after n's tag and anchor, if any, on n's line.
func skipProps(li *lineIndex, n *yaml.Node, p int) (int, error) {
	data := li.data
	end := li.ends[li.lineOf(p)-1]
	if n.Anchor == "" && n.Style&yaml.TaggedStyle == 0 {
		return p, nil
	}
	for p < end && (data[p] == '!' || data[p] == '&') {
		for p < end && data[p] != ' ' && data[p] != '\t' {
			p++
		}
		for p < end && (data[p] == ' ' || data[p] == '\t') {
			p++
		}
	}
	if p >= end {
		return 0, errors.New("its tag or anchor is on a line of its own: put the value on the same line")
	}
	return p, nil
}

// scalarSpan returns the byte range of the scalar n's text (quotes included,
// tag and anchor excluded). Plain scalars must be on one line; block scalars
// are refused.
func scalarSpan(li *lineIndex, n *yaml.Node) (int, int, error) {
	data := li.data
	start, ok := li.offset(n.Line, n.Column)
	if !ok {
		return 0, 0, errPosition("the value")
	}
	p, err := skipProps(li, n, start)
	if err != nil {
		return 0, 0, err
	}
	if p >= len(data) {
		return 0, 0, errPosition("the value")
	}
	switch n.Style &^ yaml.TaggedStyle {
	case yaml.DoubleQuotedStyle:
		if data[p] != '"' {
			return 0, 0, errPosition("the quoted value")
		}
		for q := p + 1; q < len(data); q++ {
			switch data[q] {
			case '\\':
				q++
			case '"':
				return p, q + 1, nil
			}
		}
		return 0, 0, errPosition("the end of the quoted value")
	case yaml.SingleQuotedStyle:
		if data[p] != '\'' {
			return 0, 0, errPosition("the quoted value")
		}
		for q := p + 1; q < len(data); q++ {
			if data[q] == '\'' {
				if q+1 < len(data) && data[q+1] == '\'' {
					q++
					continue
				}
				return p, q + 1, nil
			}
		}
		return 0, 0, errPosition("the end of the quoted value")
	case 0:
		end := li.ends[li.lineOf(p)-1]
		q := p
		for q < end {
			if (data[q] == ' ' || data[q] == '\t') && q+1 < end && data[q+1] == '#' {
				break
			}
			if data[q] == ':' && (q+1 == end || data[q+1] == ' ' || data[q+1] == '\t') {
				break
			}
			q++
		}
		for q > p && (data[q-1] == ' ' || data[q-1] == '\t') {
			q--
		}
		if string(data[p:q]) != n.Value {
			return 0, 0, errors.New("the value spans several lines: write it on one line")
		}
		return p, q, nil
	}
	return 0, 0, errors.New("the value is a block scalar (| or >): write it as a plain scalar")
}

// colonAfter returns the offset of the ':' following the mapping key.
func colonAfter(li *lineIndex, key *yaml.Node) (int, error) {
	_, end, err := scalarSpan(li, key)
	if err != nil {
		return 0, err
	}
	lineEnd := li.ends[li.lineOf(end-1)-1]
	for p := end; p < lineEnd; p++ {
		switch li.data[p] {
		case ' ', '\t':
			continue
		case ':':
			return p, nil
		}
		break
	}
	return 0, errPosition("the ':' after the key")
}

// lineSpan returns the byte range of the whole lines holding key: value (its
// trailing comment and line break included).
func lineSpan(li *lineIndex, key, val *yaml.Node) (int, int, error) {
	data := li.data
	kstart, ok := li.offset(key.Line, key.Column)
	if !ok {
		return 0, 0, errPosition("the key")
	}
	lineStart := li.starts[key.Line-1]
	if strings.Trim(string(data[lineStart:kstart]), " ") != "" {
		return 0, 0, errors.New("the key is not on a line of its own")
	}
	var end int
	switch {
	case val.Kind == yaml.ScalarNode && val.Style == 0 && val.Value == "" && val.Anchor == "":
		colon, err := colonAfter(li, key)
		if err != nil {
			return 0, 0, err
		}
		end = colon + 1
	case val.Kind == yaml.ScalarNode:
		var err error
		if _, end, err = scalarSpan(li, val); err != nil {
			return 0, 0, err
		}
	default:
		return 0, 0, errors.New("its value is not a scalar: write it as branch: <name> on one line")
	}
	line := li.lineOf(end - 1)
	lineEnd := li.ends[line-1]
	p := end
	for p < lineEnd && (data[p] == ' ' || data[p] == '\t') {
		p++
	}
	if p < lineEnd && data[p] != '#' {
		return 0, 0, errors.New("something follows its value on the same line")
	}
	return lineStart, li.nextLineStart(line), nil
}

// verify parses out and checks that the edit did what it should and nothing
// else: the same documents, the edited Stack equal to the original but for
// spec.commit (now sha) and spec.branch (gone).
func verify(s *stack, out []byte, sha string, removed map[*yaml.Node]bool) error {
	docs, err := parseDocs(out)
	if err != nil {
		return fmt.Errorf("the edited file would not parse (%v): rewrite spec.commit and spec.branch as plain scalars, one per line", err)
	}
	fail := func(what string) error {
		return fmt.Errorf("the edit could not be made exactly (%s): rewrite spec.commit and spec.branch as plain scalars, one per line", what)
	}
	if len(docs) != len(s.f.docs) {
		return fail("the number of documents would change")
	}
	newStacks := stacksIn(&file{docs: docs})
	var ns *stack
	for _, c := range newStacks {
		if c.doc == s.doc {
			ns = c
		}
	}
	if ns == nil {
		return fail("the document would no longer be a Stack")
	}
	_, spec := get(ns.root, "spec")
	cs := pairs(spec, "commit")
	if len(cs) != 1 || len(pairs(spec, "branch")) != 0 {
		return fail("spec.commit or spec.branch would be wrong")
	}
	if v := spec.Content[cs[0]+1]; v.Kind != yaml.ScalarNode || v.Value != sha || v.ShortTag() != "!!str" {
		return fail("spec.commit would not be the commit")
	}
	added := map[*yaml.Node]bool{spec.Content[cs[0]]: true}
	for i := range docs {
		skipA, skipB := map[*yaml.Node]bool(nil), map[*yaml.Node]bool(nil)
		if i == s.doc {
			skipA, skipB = removed, added
		}
		if !sameNode(s.f.docs[i], docs[i], skipA, skipB, 0) {
			return fail(fmt.Sprintf("document %d would change", i+1))
		}
	}
	return nil
}

// sameNode compares two trees by kind, tag, value and anchor; mapping pairs
// whose key is in skipA (resp. skipB) are left out. Aliases compare by name.
func sameNode(a, b *yaml.Node, skipA, skipB map[*yaml.Node]bool, depth int) bool {
	if a == nil || b == nil || depth > 10000 {
		return a == b
	}
	if a.Kind != b.Kind || a.ShortTag() != b.ShortTag() || a.Value != b.Value || a.Anchor != b.Anchor {
		return false
	}
	ac, bc := a.Content, b.Content
	if a.Kind == yaml.MappingNode {
		ac, bc = dropPairs(ac, skipA), dropPairs(bc, skipB)
	}
	if len(ac) != len(bc) {
		return false
	}
	for i := range ac {
		if !sameNode(ac[i], bc[i], skipA, skipB, depth+1) {
			return false
		}
	}
	return true
}

func dropPairs(c []*yaml.Node, skip map[*yaml.Node]bool) []*yaml.Node {
	if len(skip) == 0 {
		return c
	}
	var out []*yaml.Node
	for i := 0; i+1 < len(c); i += 2 {
		if !skip[c[i]] {
			out = append(out, c[i], c[i+1])
		}
	}
	return out
}

// syncWrites makes writeAtomic fsync the new file before the rename; the fuzz
// test turns it off for speed.
var syncWrites = true

// writeAtomic replaces path with data: a temporary file in the same directory,
// given path's mode, renamed over it.
func writeAtomic(path string, data []byte, mode fs.FileMode) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Chmod(mode.Perm()); err != nil {
		return err
	}
	if syncWrites {
		if err = tmp.Sync(); err != nil {
			return err
		}
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
