package report

import (
	"fmt"
	"sort"
	"strings"

	"github.com/stackflow-io/stackflow/github-action/result"
)

// MaxSummaryBytes is GitHub's limit on a step's job summary
// ($GITHUB_STEP_SUMMARY), 1 MiB.
const MaxSummaryBytes = 1 << 20

// SummaryOptions configure Summary.
type SummaryOptions struct {
	// Heading is the summary's title; default "Stackflow preview".
	Heading string
	// RunURL, if set, is linked from each stack's header.
	RunURL string
	// Limit is the maximum size in bytes; default MaxSummaryBytes.
	Limit int
}

// Summary renders the job summary: a table of all stacks, then per stack
// its notes, every changed resource (op, type, name, URN) and the full
// preview output, ANSI-stripped and escaped, in collapsible blocks. Over
// the limit, the longest resource lists and outputs are cut first (whole
// lines), each with a notice.
func Summary(results []result.Result, o SummaryOptions) string {
	if o.Limit <= 0 {
		o.Limit = MaxSummaryBytes
	}
	if o.Heading == "" {
		o.Heading = "Stackflow preview"
	}
	rs := append([]result.Result{}, results...)
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].Key < rs[j].Key })

	var head strings.Builder
	head.WriteString("## " + Text(o.Heading) + "\n\n")
	if len(rs) == 0 {
		head.WriteString("No stacks previewed.\n")
		return head.String()
	}
	head.WriteString("| Stack | Result | Create | Update | Delete | Replace | Same |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rs {
		c := r.Changes
		fmt.Fprintf(&head, "| %s | %s | %d | %d | %d | %d | %d |\n", Text(r.Key),
			statusText(Info{Status: r.Status, Changes: c}), c.Create, c.Update, c.Delete, c.Replace, c.Same)
	}

	// Each stack: fixed text around two cuttable blobs (rows, output).
	type stack struct {
		pre, mid, post string
		rows, output   string
	}
	stacks := make([]stack, len(rs))
	for i, r := range rs {
		var pre strings.Builder
		pre.WriteString(header(r, o.RunURL) + "\n\n")
		if facts := facts(r); facts != "" {
			pre.WriteString(facts + "\n\n")
		}
		for _, n := range r.Notes {
			pre.WriteString("- ⚠️ " + multiline(n) + "\n")
		}
		if len(r.Notes) > 0 {
			pre.WriteString("\n")
		}
		if r.Error != "" {
			pre.WriteString("**Error**\n\n<pre>\n" + preText(r.Error) + "\n</pre>\n\n")
		}
		s := stack{pre: pre.String()}
		if changed := changedResources(r.Resources); len(changed) > 0 {
			var rows strings.Builder
			for _, res := range changed {
				rows.WriteString(resourceRow(res)[:len(resourceRow(res))-2] + " | " + Text(res.URN) + " |\n")
			}
			s.pre += "<details><summary>" + plural(len(changed), "changed resource", "changed resources") +
				"</summary>\n\n| Op | Type | Name | URN |\n| --- | --- | --- | --- |\n"
			s.rows = rows.String()
			s.mid = "\n</details>\n\n"
		}
		if out := strings.TrimSpace(StripANSI(r.Output)); out != "" {
			s.mid += "<details><summary>Preview output</summary>\n\n<pre>\n"
			s.output = preText(out) + "\n"
			s.post = "</pre>\n\n</details>\n"
		}
		stacks[i] = s
	}
	fixed := len(head.String())
	var blobs []int
	for _, s := range stacks {
		fixed += len(s.pre) + len(s.mid) + len(s.post)
		blobs = append(blobs, len(s.rows), len(s.output))
	}
	const notice = "\n> ✂️ Truncated: 18446744073709551615 bytes more, over GitHub's 1 MiB job summary limit.\n\n"
	const topNotice = "> ✂️ This summary was truncated to fit GitHub's 1 MiB job summary limit.\n\n"
	total := fixed
	for _, n := range blobs {
		total += n
	}
	limitCap := -1 // no cut
	if total > o.Limit {
		budget := o.Limit - fixed - len(topNotice) - len(notice)*len(blobs)
		limitCap = 0
		if budget > 0 {
			lo, hi := 0, 0
			for _, n := range blobs {
				hi = max(hi, n)
			}
			for lo < hi { // largest cap with sum(min(n, cap)) <= budget
				mid := (lo + hi + 1) / 2
				sum := 0
				for _, n := range blobs {
					sum += min(n, mid)
				}
				if sum <= budget {
					lo = mid
				} else {
					hi = mid - 1
				}
			}
			limitCap = lo
		}
	}
	cut := func(s string) string {
		if limitCap < 0 || len(s) <= limitCap {
			return s
		}
		kept := cutBytes(s, limitCap)
		if kept != "" && !strings.HasSuffix(kept, "\n") {
			kept += "\n"
		}
		return kept + fmt.Sprintf("\n> ✂️ Truncated: %d bytes more, over GitHub's 1 MiB job summary limit.\n\n", len(s)-len(kept))
	}
	var b strings.Builder
	b.WriteString(head.String())
	if limitCap >= 0 {
		b.WriteString("\n" + topNotice)
	}
	for _, s := range stacks {
		b.WriteString("\n" + strings.TrimRight(s.pre+cut(s.rows)+s.mid+cut(s.output)+s.post, "\n") + "\n")
	}
	out := b.String()
	if len(out) > o.Limit { // fixed text alone is too long: last resort
		const last = "\n\n> ✂️ Truncated to fit GitHub's 1 MiB job summary limit.\n"
		out = cutBytes(out, max(0, o.Limit-len(last))) + last
		if len(out) > o.Limit {
			out = out[:0]
		}
	}
	return out
}

// Status returns a commit status's state and description (≤ 140
// characters) for one stack's result: success for a preview that ran
// (changes or not), failure for a failed preview, and notPreviewed
// ("failure" unless the workflow chose "success"; the not-previewed input)
// for a Stack that was not previewed, with the reason.
func Status(r result.Result, notPreviewed string) (state, description string) {
	switch r.Status {
	case result.Failed:
		state, description = "failure", "preview failed"
		if r.Error != "" && !strings.Contains(strings.TrimSpace(r.Error), "\n") {
			description += ": " + oneLine(r.Error)
		}
	case result.Skipped:
		state, description = notPreviewed, "not previewed"
		if state != "success" {
			state = "failure"
		}
		if len(r.Notes) > 0 {
			description += ": " + oneLine(r.Notes[0])
		}
	default:
		state = "success"
		if r.Changes.Any() {
			description = "changes: " + counts(r.Changes)
		} else {
			description = "no changes"
		}
	}
	return state, Truncate(description, 140)
}

func oneLine(s string) string { return strings.Join(strings.Fields(StripANSI(s)), " ") }

// Truncate cuts s to at most n characters, ending with "…" if cut.
func Truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	return string(r[:n-1]) + "…"
}
