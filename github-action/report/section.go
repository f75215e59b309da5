package report

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"strings"

	"github.com/stackflow-io/stackflow/github-action/result"
)

// Markers that structure the PR comment. They are HTML comments, hidden
// when GitHub renders the Markdown. Text from results is escaped so it can
// never contain one.
const (
	// TopMarker starts the comment; the client finds the comment by it.
	TopMarker        = "<!-- stackflow:preview -->"
	sectionPrefix    = `<!-- stackflow:section key="`
	sectionSuffix    = `" -->`
	SectionEndMarker = "<!-- stackflow:section-end -->"
	dataPrefix       = "<!-- stackflow:data "
	dataSuffix       = " -->"
	tableHeader      = "| Op | Type | Name |"
	tableDelimiter   = "| --- | --- | --- |"
	moreNoticePrefix = "_… "
)

// SectionOptions configure Section.
type SectionOptions struct {
	// RunURL is the workflow run (where the job summary has the full
	// preview); the section's "details" link.
	RunURL string
	// Compact renders a succeeded preview without changes as its header
	// line only (plus its notes): the "on-change" style, where a stack
	// that would not change takes one line.
	Compact bool
	// Outdated marks the section as describing an older commit (for a
	// section kept from an earlier run); see also MarkOutdated.
	Outdated bool
	// OutdatedReason says why, e.g. "previewed at 1a2b3c4, the PR is now
	// at 5d6e7f8".
	OutdatedReason string
	// Scope names the job that writes every section of its kind (manifests
	// mode: "manifests:<dir>"); see CommentOptions.Scope.
	Scope string
}

// Info is a section's machine-readable summary, embedded in the section as
// a hidden JSON comment so that any job can rebuild the comment's summary
// table from sections other jobs wrote.
type Info struct {
	Key      string         `json:"key"`
	Project  string         `json:"project,omitempty"`
	Stack    string         `json:"stack,omitempty"`
	Status   result.Status  `json:"status"`
	Changes  result.Changes `json:"changes"`
	URL      string         `json:"url,omitempty"`
	Outdated bool           `json:"outdated,omitempty"`
	// Scope is SectionOptions.Scope.
	Scope string `json:"scope,omitempty"`
	// Digest identifies the section's content as first rendered (before any
	// truncation): the client compares it to confirm its write survived.
	Digest string `json:"digest"`
}

// Section renders one stack's section of the PR comment.
//
// The key is made valid UTF-8 (invalid bytes become U+FFFD); ParseSection returns
// the key as the section carries it.
func Section(r result.Result, o SectionOptions) string {
	r.Key = strings.ToValidUTF8(r.Key, "\uFFFD")
	var b strings.Builder
	line := func(s string) { b.WriteString(s); b.WriteByte('\n') }

	line(header(r, o.RunURL))
	if o.Outdated {
		line("")
		line(outdatedLine(o.OutdatedReason))
	}
	compact := o.Compact && r.Status == result.Succeeded && !r.Changes.Any() && r.Error == ""
	if f := facts(r); !compact && f != "" {
		line("")
		line(f)
	}
	// A one-line error (a refused Stack, a clone that failed) is shown as
	// it is; a longer one (the engine's) in the details.
	shortError := r.Error != "" && !strings.Contains(strings.TrimSpace(r.Error), "\n") && len(r.Error) <= 400
	if len(r.Notes) > 0 || shortError {
		line("")
		if shortError {
			line("- ❌ " + Text(r.Error))
		}
		for _, n := range r.Notes {
			line("- ⚠️ " + multiline(n))
		}
	}
	changed := changedResources(r.Resources)
	longError := r.Error != "" && !shortError
	if !compact && (len(changed) > 0 || longError) {
		var what []string
		if len(changed) > 0 {
			what = append(what, plural(len(changed), "changed resource", "changed resources"))
		}
		if longError {
			what = append(what, "error")
		}
		line("")
		line("<details><summary>" + strings.Join(what, " and ") + "</summary>")
		if len(changed) > 0 {
			line("")
			line(tableHeader)
			line(tableDelimiter)
			for _, res := range changed {
				line(resourceRow(res))
			}
		}
		if longError {
			line("")
			line("<pre>")
			line(preText(r.Error))
			line("</pre>")
		}
		line("")
		line("</details>")
	}
	body := strings.TrimRight(b.String(), "\n")
	sum := sha256.Sum256([]byte(body))
	info := Info{
		Key: r.Key, Project: r.Project, Stack: r.Stack, Status: r.Status,
		Changes: r.Changes, URL: o.RunURL, Outdated: o.Outdated, Scope: o.Scope,
		Digest: hex.EncodeToString(sum[:8]),
	}
	return startMarker(r.Key) + "\n" + dataLine(info) + "\n" + body + "\n" + SectionEndMarker
}

func header(r result.Result, runURL string) string {
	h := "#### " + statusEmoji(r) + " " + Text(r.Key) + " · "
	switch {
	case r.Status == result.Failed:
		h += "failed"
	case r.Status == result.Skipped:
		h += "not previewed"
	case r.Changes.Any():
		h += counts(r.Changes)
	default:
		h += "no changes"
	}
	if r.Status == result.Failed && r.Changes.Any() {
		h += " · " + counts(r.Changes)
	}
	if u := safeURL(runURL); u != "" {
		h += " · [details](" + u + ")"
	}
	return h
}

// facts is the line naming the Pulumi stack and what was previewed:
// "Pulumi stack web/dev · program in infra/", or without the project when
// it is unknown (a Stack refused before its program was read).
func facts(r result.Result) string {
	var f []string
	switch {
	case r.Project != "" && r.Stack != "":
		f = append(f, "Pulumi stack "+Text(r.Project+"/"+r.Stack))
	case r.Stack != "":
		f = append(f, "Pulumi stack "+Text(r.Stack))
	}
	if r.Source != "" {
		f = append(f, Text(r.Source))
	}
	return strings.Join(f, " · ")
}

func counts(c result.Changes) string {
	return fmt.Sprintf("+%d ~%d -%d ±%d", c.Create, c.Update, c.Delete, c.Replace)
}

func statusEmoji(r result.Result) string {
	switch r.Status {
	case result.Failed:
		return "❌"
	case result.Skipped:
		return "⏭️"
	}
	if r.Changes.Any() {
		return "📝"
	}
	return "✅"
}

func statusText(i Info) string {
	switch i.Status {
	case result.Failed:
		return "❌ failed"
	case result.Skipped:
		return "⏭️ not previewed"
	case result.Succeeded:
		if i.Changes.Any() {
			return "📝 changes"
		}
		return "✅ no changes"
	}
	return Text(string(i.Status))
}

func outdatedLine(reason string) string {
	s := "> ⚠️ **Outdated**"
	if reason != "" {
		s += ": " + Text(reason)
	}
	return s
}

var opSymbols = map[string]string{
	"create": "+", "update": "~", "delete": "-", "replace": "±",
	"create-replacement": "+±", "delete-replaced": "-±",
}

func resourceRow(res result.Resource) string {
	op := Text(res.Op)
	if s, ok := opSymbols[res.Op]; ok {
		op = s + " " + op
	}
	return "| " + op + " | " + Text(res.Type) + " | " + Text(res.Name) + " |"
}

func changedResources(rs []result.Resource) []result.Resource {
	out := make([]result.Resource, 0, len(rs))
	for _, r := range rs {
		if r.Op != "same" && r.Op != "" {
			out = append(out, r)
		}
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// safeURL returns u if it is an http(s) URL that cannot break out of a
// Markdown link, else "".
func safeURL(u string) string {
	if !(strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://")) {
		return ""
	}
	if strings.ContainsAny(u, " \t\r\n()<>\"'`[]\\") || strings.Contains(u, "--") {
		return ""
	}
	return u
}

// startMarker renders a section's start marker; the key is HTML-escaped
// and any "--" in it broken by a character reference, so it holds neither
// a quote nor an HTML comment's end.
func startMarker(key string) string {
	k := html.EscapeString(strings.ToValidUTF8(key, "\uFFFD"))
	k = strings.ReplaceAll(k, "--", "-&#45;")
	k = strings.NewReplacer("\n", "&#10;", "\r", "&#13;").Replace(k)
	return sectionPrefix + k + sectionSuffix
}

func dataLine(i Info) string {
	j, _ := json.Marshal(i) // escapes <, >, & as \u003c…
	s := strings.ReplaceAll(string(j), "--", `-\u002d`)
	return dataPrefix + s + dataSuffix
}

// MarkOutdated marks a rendered section (from Section or from an existing
// comment) as outdated: a notice under its header and Outdated in its
// data. A section already outdated is returned unchanged.
func MarkOutdated(section, reason string) (string, error) {
	p, err := parseSection(section)
	if err != nil {
		return "", err
	}
	if p.info.Outdated {
		return section, nil
	}
	p.info.Outdated = true
	lines := append([]string{}, p.lines[:3]...)
	lines[1] = dataLine(p.info)
	lines = append(lines, "", outdatedLine(reason))
	lines = append(lines, p.lines[3:]...)
	return strings.Join(lines, "\n"), nil
}
