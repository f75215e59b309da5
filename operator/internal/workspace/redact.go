package workspace

import (
	"regexp"
	"slices"
	"strings"
)

// minSecretLength: shorter values ("1", "yes") are not masked, since masking
// them everywhere would garble messages while hiding nothing.
const minSecretLength = 4

// urlCredentials matches the userinfo of a URL ("https://user:token@host").
var urlCredentials = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s@]+@`)

// Redact masks, in a message shown in a status or an event, URL credentials
// and every secret value given (each whole value, and each line of a
// multi-line value such as a private key), longest first.
func Redact(msg string, secrets []string) string {
	msg = urlCredentials.ReplaceAllString(msg, "${1}***@")
	var values []string
	for _, s := range secrets {
		values = append(values, s)
		if strings.Contains(s, "\n") {
			values = append(values, strings.Split(s, "\n")...)
		}
	}
	for i, v := range values {
		values[i] = strings.TrimSpace(v)
	}
	values = slices.DeleteFunc(values, func(v string) bool { return len(v) < minSecretLength })
	slices.SortFunc(values, func(a, b string) int { return len(b) - len(a) })
	values = slices.Compact(values)
	for _, v := range values {
		msg = strings.ReplaceAll(msg, v, "[secret]")
	}
	return redactCut(msg, values)
}

// minCutPrefix is the shortest start of a secret redacted before an ellipsis.
const minCutPrefix = 8

// redactCut redacts the start of a secret that a cap cut before this runs
// (pod.lastLine caps a termination message's line and appends "…"), which
// whole-value replacement cannot match.
func redactCut(msg string, values []string) string {
	parts := strings.Split(msg, "…")
	for i := 0; i < len(parts)-1; i++ {
		best := 0
		for _, v := range values {
			for k := min(len(v), len(parts[i])); k >= minCutPrefix && k > best; k-- {
				if strings.HasSuffix(parts[i], v[:k]) {
					best = k
					break
				}
			}
		}
		if best > 0 {
			parts[i] = parts[i][:len(parts[i])-best] + "[secret]"
		}
	}
	return strings.Join(parts, "…")
}
