package plan

import (
	"regexp"
	"strings"
)

// violationLine is the engine's error when an up constrained to a plan meets
// an operation the plan does not contain: "resource <urn> violates plan:
// <what diverged>".
var violationLine = regexp.MustCompile(`resource (urn:pulumi:\S+) violates plan: ([^\n]*)`)

// notAllowedLine is the engine's error when the plan has no such step for
// a resource: "<op> is not allowed by the plan: …". The engine's output
// names the resource at the start of the line ("<type> <name> [running]
// error: …").
var notAllowedLine = regexp.MustCompile(`(?m)^\s*(?:(\S+:\S+)\s+(\S+)\s+(?:\S+\s+)?error:\s+)?(?:error:\s+)?(\S+ is not allowed by the plan: [^\n]*)`)

// maxViolation bounds the violation text kept (what diverged may quote
// property values).
const maxViolation = 1024

// Violation finds, in an up's error text, the first operation that violated
// the plan it was constrained to: the resource's URN and the engine's words
// for what diverged. ok is false when the text names no violation.
//
// The engine says it in two ways: "resource <urn> violates plan: <what>"
// (the resource's inputs differ from the plan's), and "<op> is not allowed
// by the plan: <why>" (an operation the plan has no step for), whose
// resource is read from the output line that reports it ("<type> <name>";
// empty when no line names it).
func Violation(text string) (resource, detail string, ok bool) {
	if m := violationLine.FindStringSubmatch(text); m != nil {
		return m[1], capViolation(strings.TrimSpace(m[2]) + ""), true
	}
	// A line naming the resource is preferred to the summary's bare
	// "error: …" line.
	var bare string
	for _, m := range notAllowedLine.FindAllStringSubmatch(text, -1) {
		if m[1] != "" {
			return m[1] + " " + m[2], capViolation(strings.TrimSpace(m[3])), true
		}
		if bare == "" {
			bare = strings.TrimSpace(m[3])
		}
	}
	if bare != "" {
		return "", capViolation(bare), true
	}
	return "", "", false
}

func capViolation(detail string) string {
	if len(detail) > maxViolation {
		detail = detail[:maxViolation] + "…"
	}
	return detail
}
