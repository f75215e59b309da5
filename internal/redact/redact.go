// Package redact is the one implementation of masking secrets in text that
// leaves a process (a status, an event, a log line, a PR comment, an error):
// by value, for the values a component knows are secret, and by shape, for
// credentials in URLs. The operator, the agent and the GitHub Action use it;
// the agent keeps only its own bookkeeping of which values are current.
package redact

import (
	"regexp"
	"slices"
	"strings"
)

// Mask replaces a secret value.
const Mask = "[secret]"

// MinLength: shorter values ("1", "yes", "dev") are not masked, since
// masking them everywhere would garble messages while hiding nothing.
const MinLength = 4

// minCutPrefix is the shortest start of a secret masked before an ellipsis.
const minCutPrefix = 8

// ellipses mark a value that something before the redaction cut: the Pulumi
// engine shortens long values in its output (`echoed: "abc…`), and a
// termination message's line is capped with "…".
var ellipses = []string{"…", "..."}

// Values is a prepared set of secret values: each value given and each line
// of a multi-line one (a private key), trimmed, at least MinLength long,
// without duplicates, longest first so that a value containing another is
// masked whole. The zero Values masks nothing.
type Values struct {
	list []string
}

// NewValues prepares secrets for masking.
func NewValues(secrets ...string) Values {
	var list []string
	for _, s := range secrets {
		for _, v := range append([]string{s}, strings.Split(s, "\n")...) {
			if v = strings.TrimSpace(v); len(v) >= MinLength {
				list = append(list, v)
			}
		}
	}
	slices.SortFunc(list, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	return Values{list: slices.Compact(list)}
}

// Len is the number of distinct values masked.
func (v Values) Len() int { return len(v.list) }

// List is the values masked, longest first (a copy).
func (v Values) List() []string { return slices.Clone(v.list) }

// Text masks in s the start (at least 8 bytes) of a value cut before an
// ellipsis, which whole-value replacement cannot match, then every value.
func (v Values) Text(s string) string {
	if len(v.list) == 0 {
		return s
	}
	// The cut starts first: a shorter value inside a cut one ("hunter2" in
	// "hunter2-pa…") would otherwise be masked alone, leaving the rest.
	for _, mark := range ellipses {
		if !strings.Contains(s, mark) {
			continue
		}
		parts := strings.Split(s, mark)
		for i := range len(parts) - 1 {
			if n := v.cutPrefix(parts[i]); n > 0 {
				parts[i] = parts[i][:len(parts[i])-n] + Mask
			}
		}
		s = strings.Join(parts, mark)
	}
	for _, secret := range v.list {
		s = strings.ReplaceAll(s, secret, Mask)
	}
	return s
}

// cutPrefix is the length of the longest start (at least minCutPrefix bytes)
// of a value that text ends with, or 0.
func (v Values) cutPrefix(text string) int {
	best := 0
	for _, secret := range v.list {
		for k := min(len(secret), len(text)); k >= minCutPrefix && k > best; k-- {
			if strings.HasSuffix(text, secret[:k]) {
				best = k
				break
			}
		}
	}
	return best
}

// urlUserinfo matches the userinfo of a URL ("https://user:token@host"), in a
// URL alone or anywhere in a text.
var urlUserinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s@]+@`)

// URLCredentials replaces the userinfo of every URL in s (a URL, or a text
// holding URLs) with "***": "https://x-access-token:ghp_…@github.com/o/r"
// becomes "https://***@github.com/o/r".
func URLCredentials(s string) string {
	return urlUserinfo.ReplaceAllString(s, "${1}***@")
}
