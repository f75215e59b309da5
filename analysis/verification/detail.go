package verification

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxDetail bounds, in bytes, the excerpt of another component's message
// that an answer may quote (the Stack's Stalled message, or the refusal of
// its export).
const MaxDetail = 300

// redacted replaces what Detail masks.
const redacted = "[redacted]"

// The shapes of credentials Detail masks. The service never holds the
// Stack's secret values (the cache strips them), so it cannot mask them by
// value as the operator and its agents do; it masks what looks like one.
var (
	pemBlock = regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]*-----.*?(?:-----END [A-Z0-9 ]*-----|$)`)
	// urlUserinfo is the user:password@ of a URL.
	urlUserinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s@]+@`)
	// authScheme is an Authorization header value.
	authScheme = regexp.MustCompile(`(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{6,}`)
	// sensitiveKV is a key naming a secret, with its value: key=value,
	// key: value, "key":"value", ?key=value.
	sensitiveKV = regexp.MustCompile(`(?i)([A-Za-z0-9_.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|credential|passphrase|auth)[A-Za-z0-9_.-]*"?\s*[:=]\s*)("[^"]*"|'[^']*'|[^\s,;&"'}\])]+)`)
	// knownToken is a credential with a well-known prefix (GitHub, Pulumi,
	// GitLab, Slack, AWS, Google, OpenAI-style keys) or a JWT.
	knownToken = regexp.MustCompile(`\b(?:gh[pousr]_[A-Za-z0-9]{6,}|github_pat_[A-Za-z0-9_]{6,}|pul-[A-Za-z0-9]{6,}|glpat-[A-Za-z0-9_-]{6,}|xox[abposr]-[A-Za-z0-9-]{6,}|(?:AKIA|ASIA)[0-9A-Z]{12,}|AIza[0-9A-Za-z_-]{20,}|sk-[A-Za-z0-9_-]{16,}|eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*)`)
	// opaque is a long run of token characters; opaqueSecret decides
	// whether it is one.
	opaque = regexp.MustCompile(`[A-Za-z0-9+/=_-]{24,}`)
)

// Detail returns msg as an answer may quote it: credentials masked
// ("[redacted]": PEM blocks, URL user info, Authorization values, the values
// of keys naming a secret, well-known token shapes, and long opaque strings:
// mixed-case alphanumerics of 24 characters or more, hex of 32 or more), on
// one line, valid UTF-8, and at most MaxDetail bytes (cut at a character,
// ending in "…"). It masks before it cuts, so a cut cannot leave the start of
// a credential its shape no longer matches.
func Detail(msg string) string {
	s := strings.ToValidUTF8(msg, "\uFFFD")
	s = pemBlock.ReplaceAllString(s, redacted)
	s = urlUserinfo.ReplaceAllString(s, "${1}"+redacted+"@")
	s = authScheme.ReplaceAllString(s, "${1}${2}"+redacted)
	s = sensitiveKV.ReplaceAllStringFunc(s, maskValue)
	s = knownToken.ReplaceAllString(s, redacted)
	s = opaque.ReplaceAllStringFunc(s, func(run string) string {
		if opaqueSecret(run) {
			return redacted
		}
		return run
	})
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	return cut(s, MaxDetail)
}

// maskValue masks the value of a sensitiveKV match, keeping its quotes, and
// an Authorization scheme already masked by authScheme.
func maskValue(kv string) string {
	m := sensitiveKV.FindStringSubmatch(kv)
	key, value := m[1], m[2]
	switch {
	case strings.EqualFold(value, "bearer") || strings.EqualFold(value, "basic") || value == redacted:
		return kv
	case len(value) >= 2 && (value[0] == '"' || value[0] == '\''):
		return key + value[:1] + redacted + value[:1]
	}
	return key + redacted
}

// opaqueSecret: a run of token characters that is mixed-case alphanumeric
// (base64, random API keys) or 32 hexadecimal digits or more. Lower-case
// words joined by dashes or slashes (paths, resource names) are kept.
func opaqueSecret(run string) bool {
	var lower, upper, digit, hex int
	for _, r := range run {
		switch {
		case r >= 'a' && r <= 'z':
			lower++
		case r >= 'A' && r <= 'Z':
			upper++
		case r >= '0' && r <= '9':
			digit++
		}
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F' {
			hex++
		}
	}
	if hex == len(run) && len(run) >= 32 {
		return true
	}
	return lower > 0 && upper > 0 && digit > 0
}

// cut bounds s to n bytes at a character boundary, ending in "…" when it
// cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	end := n - len(ellipsis)
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return strings.TrimRight(s[:end], " ") + ellipsis
}
