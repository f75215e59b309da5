package plan

import (
	"regexp"
	"strings"
)

// violationLine is the engine's error when an up constrained to a plan meets
// an operation the plan does not contain: "resource <urn> violates plan:
// <what diverged>".
var violationLine = regexp.MustCompile(`resource (urn:pulumi:\S+) violates plan: ([^\n]*)`)

// maxViolation bounds the violation text kept (what diverged may quote
// property values).
const maxViolation = 1024

// Violation finds, in an up's error text, the first operation that violated
// the plan it was constrained to: the resource's URN and the engine's words
// for what diverged. ok is false when the text names no violation.
func Violation(text string) (urn, detail string, ok bool) {
	m := violationLine.FindStringSubmatch(text)
	if m == nil {
		return "", "", false
	}
	detail = strings.TrimSpace(m[2])
	if len(detail) > maxViolation {
		detail = detail[:maxViolation] + "…"
	}
	return m[1], detail, true
}
