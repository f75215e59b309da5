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
	}
	return msg
}

// truncateMessage caps msg at maxMessage bytes.
func truncateMessage(msg string) string {
	if len(msg) > maxMessage {
		msg = msg[:maxMessage] + "…"
	}
	return msg
}
