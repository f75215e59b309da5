package agent

import (
	"strings"
)

// maxMessage caps result messages (they end up in Kubernetes status).
const maxMessage = 4000

// summarize turns an Automation API error, which carries the whole stdout and
// stderr of the CLI, into the engine's own error lines, capped at maxMessage.
// A message that may hold a secret goes through redactor.summarize instead,
// which redacts before the cap: a secret cut by the cap would no longer match.
func summarize(err error) string {
	return truncateMessage(summaryLines(err))
}

// summaryLines is summarize without the cap.
func summaryLines(err error) string {
	if err == nil {
		return ""
	}
	text := err.Error()
	var picked []string
	seen := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		l := strings.TrimSpace(line)
		// The Automation API's error labels the first line of each of the
		// CLI's streams ("stderr: error: …"): that line counts too.
		for _, label := range []string{"stdout:", "stderr:"} {
			if rest, ok := strings.CutPrefix(l, label); ok {
				l = strings.TrimSpace(rest)
			}
		}
		if !strings.HasPrefix(l, "error:") {
			continue
		}
		l = strings.TrimSpace(strings.TrimPrefix(l, "error:"))
		if l == "" || seen[l] || strings.HasPrefix(l, "update failed") || strings.HasPrefix(l, "preview failed") {
			continue
		}
		seen[l] = true
		picked = append(picked, l)
	}
	msg := strings.Join(picked, "; ")
	if msg == "" {
		msg, _, _ = strings.Cut(text, "\n")
		msg = strings.TrimSpace(msg)
		// No error line ("failed to create stack: exit status 1"): the
		// CLI's last words on stderr say why.
		if last := lastStderrLine(text); last != "" {
			msg += ": " + last
		}
	}
	return msg
}

// lastStderrLine is the last non-empty line of the CLI's stderr in an
// Automation API error ("…\nstderr: <stderr>\n"), or "".
func lastStderrLine(text string) string {
	i := strings.LastIndex(text, "\nstderr: ")
	if i < 0 {
		return ""
	}
	lines := strings.Split(text[i+len("\nstderr: "):], "\n")
	for j := len(lines) - 1; j >= 0; j-- {
		if l := strings.TrimSpace(lines[j]); l != "" {
			return l
		}
	}
	return ""
}

// truncateMessage caps msg at maxMessage bytes.
func truncateMessage(msg string) string {
	if len(msg) > maxMessage {
		msg = msg[:maxMessage] + "…"
	}
	return msg
}
