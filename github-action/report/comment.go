package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"maps"
	"sort"
	"strconv"
	"strings"
	"time"
)

// MaxCommentLen is GitHub's limit on an issue comment's body, in
// characters (see Len for how they are counted here).
const MaxCommentLen = 65536

// ErrTooLong is returned by Comment when even the smallest form of the
// comment (summary table and one header line per section) exceeds the
// limit.
var ErrTooLong = errors.New("report: comment cannot fit GitHub's size limit even without details")

// CommentOptions configure Comment.
type CommentOptions struct {
	// Heading is the comment's title; default "Stackflow preview". It may
	// change between runs: the comment is found by TopMarker, not by it.
	Heading string
	// RunURL is this job's workflow run, linked from the footer.
	RunURL string
	// SummaryURL is where the full detail is (the job summary), linked
	// from truncation notices; default RunURL.
	SummaryURL string
	// Now is written in the footer ("updated at"); zero omits it.
	Now time.Time
	// Outdated marks the sections of these keys (from the existing body or
	// the new sections) outdated, with the given reason (may be empty).
	Outdated map[string]string
	// Scope, when set, says the new sections are all there are of that
	// scope (SectionOptions.Scope): an existing section of the scope whose
	// key is not among them is removed. Manifests mode writes every Stack
	// the pull request changes in one job, so a Stack it no longer changes
	// loses its section.
	Scope string
	// OutdateScope, when set, marks outdated each existing section of that
	// scope that the new sections do not replace and that another run
	// wrote (its URL is not RunURL; nothing is marked without a RunURL):
	// program mode, where the jobs of one run (a matrix) share a scope and
	// each writes only its own stacks, so a stack no longer previewed
	// (a run with dev and prod, then one with dev) shows as outdated
	// instead of passing for current.
	OutdateScope string
	// Limit is the maximum length (Len); default MaxCommentLen. Tests use
	// smaller limits.
	Limit int
}

// NotPreviewedByThisRun is the reason CommentOptions.OutdateScope gives.
const NotPreviewedByThisRun = "not previewed by the latest run of this workflow (its stacks no longer include this one, or its job has not written yet)"

// Parsed is one section found in a comment body.
type Parsed struct {
	Key  string
	Info Info
	// Text is the section from its start marker through its end marker.
	Text string
}

// IsComment reports whether body is a Stackflow comment (has TopMarker).
func IsComment(body string) bool { return strings.Contains(body, TopMarker) }

// Sections returns the well-formed sections of a comment body in order;
// malformed fragments (a start marker without data or end) are skipped.
func Sections(body string) []Parsed {
	var out []Parsed
	for {
		i := strings.Index(body, sectionPrefix)
		if i < 0 {
			return out
		}
		body = body[i:]
		end := strings.Index(body, SectionEndMarker)
		if end < 0 {
			return out
		}
		if next := strings.Index(body[len(sectionPrefix):], sectionPrefix); next >= 0 && next+len(sectionPrefix) < end {
			body = body[next+len(sectionPrefix):]
			continue
		}
		text := body[:end+len(SectionEndMarker)]
		body = body[len(text):]
		if p, err := parseSection(text); err == nil {
			out = append(out, Parsed{Key: p.key, Info: p.info, Text: text})
		}
	}
}

// Find returns the section of key in body.
func Find(body, key string) (Parsed, bool) {
	for _, p := range Sections(body) {
		if p.Key == key {
			return p, true
		}
	}
	return Parsed{}, false
}

// ParseSection returns a rendered section's data (its key, status, counts, digest).
func ParseSection(section string) (Info, error) {
	p, err := parseSection(section)
	if err != nil {
		return Info{}, err
	}
	return p.info, nil
}

type parsedSection struct {
	key   string
	info  Info
	lines []string
	// details: [dStart, dEnd] inclusive, -1 if none; rows [rStart, rEnd).
	dStart, dEnd int
	rStart, rEnd int
	hidden       int // resources already hidden by an earlier truncation
	rowLens      []int
}

func parseSection(s string) (*parsedSection, error) {
	lines := strings.Split(s, "\n")
	if len(lines) < 4 || !strings.HasPrefix(lines[0], sectionPrefix) || !strings.HasSuffix(lines[0], sectionSuffix) ||
		lines[len(lines)-1] != SectionEndMarker ||
		!strings.HasPrefix(lines[1], dataPrefix) || !strings.HasSuffix(lines[1], dataSuffix) {
		return nil, errors.New("report: not a section (markers missing)")
	}
	key := html.UnescapeString(lines[0][len(sectionPrefix) : len(lines[0])-len(sectionSuffix)])
	var info Info
	if err := json.Unmarshal([]byte(lines[1][len(dataPrefix):len(lines[1])-len(dataSuffix)]), &info); err != nil {
		return nil, fmt.Errorf("report: section %q: bad data: %w", key, err)
	}
	if info.Key != key {
		return nil, fmt.Errorf("report: section %q: data is for %q", key, info.Key)
	}
	p := &parsedSection{key: key, info: info, dStart: -1, dEnd: -1, rStart: -1, rEnd: -1}
	for i, l := range lines {
		if p.dStart < 0 && strings.HasPrefix(l, "<details>") {
			p.dStart = i
		}
		if p.dStart >= 0 && p.dEnd < 0 && l == "</details>" {
			p.dEnd = i
		}
	}
	if p.dStart >= 0 && p.dEnd < 0 {
		return nil, fmt.Errorf("report: section %q: unclosed details", key)
	}
	if p.dStart >= 0 {
		for i := p.dStart; i < p.dEnd; i++ {
			if lines[i] == tableDelimiter {
				p.rStart = i + 1
				p.rEnd = p.rStart
				for p.rEnd < p.dEnd && strings.HasPrefix(lines[p.rEnd], "| ") {
					p.rEnd++
				}
				// An earlier truncation's notice: remember the count, drop it.
				if p.rEnd+1 < p.dEnd && lines[p.rEnd] == "" && strings.HasPrefix(lines[p.rEnd+1], moreNoticePrefix) {
					rest := strings.TrimPrefix(lines[p.rEnd+1], moreNoticePrefix)
					if sp := strings.IndexByte(rest, ' '); sp > 0 {
						p.hidden, _ = strconv.Atoi(rest[:sp])
					}
					lines = append(lines[:p.rEnd:p.rEnd], lines[p.rEnd+2:]...)
					p.dEnd -= 2
				}
				break
			}
		}
	}
	p.lines = lines
	if p.rStart >= 0 {
		p.rowLens = make([]int, p.rEnd-p.rStart)
		for i := range p.rowLens {
			p.rowLens[i] = Len(lines[p.rStart+i]) + 1
		}
	}
	return p, nil
}

const (
	modeFull      = iota // rows kept up to a budget
	modeNoDetails        // details replaced by a notice
	modeHeader           // markers, data and header line only
)

// render renders p with at most maxRows units of resource rows (-1: all).
func (p *parsedSection) render(mode, maxRows int, summaryURL string) string {
	see := "see the job summary"
	if u := safeURL(summaryURL); u != "" {
		see = "see the [job summary](" + u + ")"
	}
	omitted := "_Details omitted to fit GitHub's comment size limit: " + see + "._"
	switch mode {
	case modeHeader:
		return strings.Join([]string{p.lines[0], p.lines[1], p.lines[2], "", omitted, SectionEndMarker}, "\n")
	case modeNoDetails:
		if p.dStart < 0 {
			return strings.Join(p.lines, "\n")
		}
		out := append([]string{}, p.lines[:p.dStart]...)
		out = append(out, omitted)
		out = append(out, p.lines[p.dEnd+1:]...)
		return strings.Join(out, "\n")
	}
	if p.rStart < 0 || maxRows < 0 {
		if p.hidden == 0 || p.rStart < 0 {
			return strings.Join(p.lines, "\n")
		}
		maxRows = 1 << 62
	}
	keep, used := 0, 0
	for keep < len(p.rowLens) && used+p.rowLens[keep] <= maxRows {
		used += p.rowLens[keep]
		keep++
	}
	hidden := p.hidden + len(p.rowLens) - keep
	out := append([]string{}, p.lines[:p.rStart+keep]...)
	if hidden > 0 {
		out = append(out, "", fmt.Sprintf("%s%d more %s: %s._", moreNoticePrefix, hidden, pluralWord(hidden, "resource", "resources"), see))
	}
	out = append(out, p.lines[p.rEnd:]...)
	return strings.Join(out, "\n")
}

func pluralWord(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func (p *parsedSection) rowsLen() int {
	n := 0
	for _, l := range p.rowLens {
		n += l
	}
	return n
}

// Comment merges sections (each from Section) into existing (a comment
// body from an earlier Comment, or "" for a new comment): sections of other
// keys are kept as they are, those of the same key replaced, new ones
// added; all ordered by key. The summary table is rebuilt from every
// section's data, so it covers sections other jobs wrote.
//
// If the body would exceed the limit, it is truncated: first the longest
// resource lists lose rows (with a "… N more resources" notice), then
// whole <details> blocks are omitted, largest first, then sections are
// reduced to their header line, largest first. Markers are never cut. If
// even that does not fit, Comment returns ErrTooLong.
func Comment(existing string, sections []string, o CommentOptions) (string, error) {
	if o.Limit <= 0 {
		o.Limit = MaxCommentLen
	}
	if o.Heading == "" {
		o.Heading = "Stackflow preview"
	}
	if o.SummaryURL == "" {
		o.SummaryURL = o.RunURL
	}
	byKey := map[string]*parsedSection{}
	for _, e := range Sections(existing) {
		if p, err := parseSection(e.Text); err == nil {
			byKey[p.key] = p
		}
	}
	seen := map[string]bool{}
	for _, s := range sections {
		p, err := parseSection(s)
		if err != nil {
			return "", err
		}
		if seen[p.key] {
			return "", fmt.Errorf("report: two sections for key %q", p.key)
		}
		seen[p.key] = true
		byKey[p.key] = p
	}
	if o.Scope != "" {
		for k, p := range byKey {
			if p.info.Scope == o.Scope && !seen[k] {
				delete(byKey, k)
			}
		}
	}
	outdated := o.Outdated
	if o.OutdateScope != "" && o.RunURL != "" {
		outdated = maps.Clone(o.Outdated)
		if outdated == nil {
			outdated = map[string]string{}
		}
		for k, p := range byKey {
			if _, set := outdated[k]; !set && p.info.Scope == o.OutdateScope && !seen[k] && p.info.URL != o.RunURL {
				outdated[k] = NotPreviewedByThisRun
			}
		}
	}
	for key, reason := range outdated {
		p, ok := byKey[key]
		if !ok || p.info.Outdated {
			continue
		}
		s, err := MarkOutdated(strings.Join(p.lines, "\n"), reason)
		if err != nil {
			return "", err
		}
		if byKey[key], err = parseSection(s); err != nil {
			return "", err
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	ps := make([]*parsedSection, len(keys))
	for i, k := range keys {
		ps[i] = byKey[k]
	}

	top := commentTop(o, ps)
	foot := commentFooter(o)
	rendered := make([]string, len(ps))
	assemble := func(truncated bool) string {
		var b strings.Builder
		b.WriteString(top)
		if truncated {
			b.WriteString("\n\n> ⚠️ This comment was truncated to fit GitHub's 65,536-character limit")
			if u := safeURL(o.SummaryURL); u != "" {
				b.WriteString("; the [job summary](" + u + ") has every resource")
			}
			b.WriteString(".")
		}
		for _, s := range rendered {
			b.WriteString("\n\n")
			b.WriteString(s)
		}
		b.WriteString("\n\n")
		b.WriteString(foot)
		b.WriteString("\n")
		return b.String()
	}
	renderAll := func(maxRows int) string {
		for i, p := range ps {
			rendered[i] = p.render(modeFull, maxRows, o.SummaryURL)
		}
		return assemble(maxRows >= 0)
	}
	if body := renderAll(-1); Len(body) <= o.Limit && !anyHidden(ps) {
		return body, nil
	}
	// Level 1: cap every resource list at C units, the longest lists
	// shrinking first; binary search the largest C that fits.
	maxLen := 0
	for _, p := range ps {
		maxLen = max(maxLen, p.rowsLen())
	}
	if body := renderAll(0); Len(body) <= o.Limit {
		lo, hi := 0, maxLen+1 // invariant: lo fits
		if b := renderAll(maxLen); Len(b) <= o.Limit {
			return b, nil // only earlier truncations' notices
		}
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			if Len(renderAll(mid)) <= o.Limit {
				lo = mid
			} else {
				hi = mid
			}
		}
		return renderAll(lo), nil
	}
	// Level 2 and 3: omit details, then all but the header, largest first.
	renderAll(0)
	for _, mode := range []int{modeNoDetails, modeHeader} {
		order := make([]int, len(ps))
		for i := range order {
			order[i] = i
		}
		lens := make([]int, len(ps))
		for i, r := range rendered {
			lens[i] = Len(r)
		}
		sort.SliceStable(order, func(a, b int) bool { return lens[order[a]] > lens[order[b]] })
		for _, i := range order {
			rendered[i] = ps[i].render(mode, 0, o.SummaryURL)
			if body := assemble(true); Len(body) <= o.Limit {
				return body, nil
			}
		}
	}
	return "", ErrTooLong
}

func anyHidden(ps []*parsedSection) bool {
	for _, p := range ps {
		if p.hidden > 0 {
			return true
		}
	}
	return false
}

func commentTop(o CommentOptions, ps []*parsedSection) string {
	var b strings.Builder
	b.WriteString(TopMarker + "\n## " + Text(o.Heading) + "\n")
	if len(ps) == 0 {
		b.WriteString("\n✅ Nothing changes: no stack to preview at this commit.")
		return b.String()
	}
	b.WriteString("\n| Stack | Result | Create | Update | Delete | Replace | |\n| --- | --- | --- | --- | --- | --- | --- |")
	for _, p := range ps {
		i := p.info
		res := statusText(i)
		if i.Outdated {
			res += " · ⚠️ outdated"
		}
		link := ""
		if u := safeURL(i.URL); u != "" {
			link = "[details](" + u + ")"
		}
		fmt.Fprintf(&b, "\n| %s | %s | %d | %d | %d | %d | %s |", Text(i.Key), res,
			i.Changes.Create, i.Changes.Update, i.Changes.Delete, i.Changes.Replace, link)
	}
	return b.String()
}

func commentFooter(o CommentOptions) string {
	s := "<sub>Updated"
	if !o.Now.IsZero() {
		s += " " + o.Now.UTC().Format("2006-01-02 15:04 UTC")
	}
	if u := safeURL(o.RunURL); u != "" {
		s += " by [this run](" + u + ")"
	}
	return s + " · Stackflow</sub>"
}
