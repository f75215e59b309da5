package report

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ansiRE matches ANSI escape sequences: CSI (colours, cursor moves), OSC
// (titles, hyperlinks; ended by BEL or ST) and the two-byte escapes.
var ansiRE = regexp.MustCompile("\x1b\\[[0-?]*[ -/]*[@-~]|\x1b\\][^\x07\x1b]*(?:\x07|\x1b\\\\)?|\x1b[@-Z\\\\-_]|\u009b[0-?]*[ -/]*[@-~]")

// StripANSI removes ANSI escape sequences, carriage returns and other
// control characters (keeping newlines and tabs) and replaces invalid UTF-8.
func StripANSI(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if strings.ContainsAny(s, "\x1b\u009b") {
		s = ansiRE.ReplaceAllString(s, "")
	}
	if !strings.ContainsFunc(s, isDroppedControl) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if isDroppedControl(r) {
			return -1
		}
		return r
	}, s)
}

func isDroppedControl(r rune) bool {
	return r != '\n' && r != '\t' && (unicode.IsControl(r) || r == '\u2028' || r == '\u2029')
}

// escaper turns text into something that renders as itself both in
// Markdown (tables, headings, lists) and in HTML (<pre>, <summary>): HTML
// specials, Markdown emphasis/link/code/table characters and "@" (no
// mentions) become character references.
var escaper = strings.NewReplacer(
	"&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;",
	"|", "&#124;", "`", "&#96;", "*", "&#42;", "_", "&#95;", "[", "&#91;",
	"]", "&#93;", `\`, "&#92;", "~", "&#126;", "@", "&#64;",
)

// preEscaper is for text inside <pre>: HTML specials only, plus "@" so a
// mention cannot ping anyone.
var preEscaper = strings.NewReplacer(
	"&", "&amp;", "<", "&lt;", ">", "&gt;", "@", "&#64;",
)

// Text ANSI-strips s and escapes it for inline Markdown; newlines become
// spaces so the result stays on one line (a table cell, a heading).
func Text(s string) string {
	s = StripANSI(s)
	s = strings.Join(strings.Fields(s), " ")
	return escaper.Replace(s)
}

// multiline is Text but keeps line breaks as <br>.
func multiline(s string) string {
	s = StripANSI(s)
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		lines[i] = escaper.Replace(strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "<br>")
}

// preText ANSI-strips s and escapes it for a <pre> block.
func preText(s string) string {
	return preEscaper.Replace(strings.TrimRight(StripANSI(s), "\n"))
}

// Len is the length of s as GitHub's comment limit counts it, in
// characters, counted safely: UTF-16 code units (a character outside the
// Basic Multilingual Plane, such as most emoji, counts 2), never fewer than
// the characters GitHub counts.
func Len(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// cutBytes cuts s to at most n bytes on a line boundary if there is one in
// the last quarter, otherwise on a rune boundary not inside a character
// reference.
func cutBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	if i := strings.LastIndexByte(s[:n], '\n'); i >= n*3/4 {
		return s[:i]
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	if amp := strings.LastIndexByte(s[:n], '&'); amp >= 0 && amp >= n-8 && !strings.Contains(s[amp:n], ";") {
		n = amp
	}
	return s[:n]
}
