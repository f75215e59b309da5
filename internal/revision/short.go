// Package revision holds the one rule for showing a revision to a person:
// a commit SHA (or an artifact digest) shortened as git and GitHub show it.
// The Argo CD health checks (argocd-health, Lua) follow the same rule.
package revision

import "strings"

// ShortLength is how many hex digits a shortened SHA or digest keeps: git's
// default abbreviation, and what GitHub and Argo CD show.
const ShortLength = 7

// Short shortens a revision for a message: a SHA of more than ShortLength
// hex digits to its first ShortLength; a revision ending in ":<hex digest>"
// ("main@sha1:<sha>", "sha256:<digest>") keeps its prefix and shortens the
// digest; anything else (a branch, a tag, "") is returned as it is, so a
// message never shows half of a name.
func Short(rev string) string {
	if len(rev) > ShortLength && isHex(rev) {
		return rev[:ShortLength]
	}
	if i := strings.LastIndexByte(rev, ':'); i >= 0 {
		if digest := rev[i+1:]; len(digest) > ShortLength && isHex(digest) {
			return rev[:i+1] + digest[:ShortLength]
		}
	}
	return rev
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return s != ""
}
