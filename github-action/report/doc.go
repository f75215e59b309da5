// Package report renders stack preview results (package result) for GitHub:
// one section per stack for the aggregated pull-request comment (Section),
// the merge of sections into that comment's body with its summary table,
// footer and truncation to GitHub's comment size limit (Comment), the job
// summary (Summary) and a commit status's state and description (Status).
//
// Everything here is a pure function of its inputs: no network, no
// environment, no clock (times are passed in). The comment's structure is
// carried by hidden HTML comments ("markers") so that any job can find,
// replace and re-tabulate the sections written by other jobs:
//
//	<!-- stackflow:preview -->                      top marker, finds the comment
//	<!-- stackflow:section key="dev/web" -->        a section begins (key HTML-escaped)
//	<!-- stackflow:data {...} -->                   the section's summary as JSON
//	...                                             rendered Markdown
//	<!-- stackflow:section-end -->                  the section ends
//
// All text that comes from a result (names, types, errors, notes, output)
// is ANSI-stripped and escaped, so it can neither inject markup nor forge a
// marker.
//
// It imports only the standard library and
// github.com/stackflow-io/stackflow/github-action/result.
package report
