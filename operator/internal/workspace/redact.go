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
	for _, v := range slices.Compact(values) {
		msg = strings.ReplaceAll(msg, v, "[secret]")
	}
	return msg
}
