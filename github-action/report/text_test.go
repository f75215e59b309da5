package report

import (
	"strings"
	"testing"

	"github.com/stackflow-io/stackflow/github-action/result"
)

func TestStripANSI(t *testing.T) {
	for in, want := range map[string]string{
		"\x1b[1;32mgreen\x1b[0m":                     "green",
		"\x1b]8;;https://x.test\x07link\x1b]8;;\x07": "link",
		"\x1b]0;title\x1b\\text":                     "text",
		"a\rb\x00c\td\n":                             "abc\td\n",
		"bad \xff byte":                              "bad \uFFFD byte",
		"\u009b31mred":                               "red",
	} {
		if got := StripANSI(in); got != want {
			t.Errorf("StripANSI(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLen(t *testing.T) {
	if Len("aé✅") != 3 || Len("🚀") != 2 {
		t.Errorf("Len: %d %d", Len("aé✅"), Len("🚀"))
	}
}

func TestKeyRoundTrip(t *testing.T) {
	for _, k := range []string{`a--b`, `q"uote`, "new\nline", "<!-- x -->", "a&amp;b", "---"} {
		s := Section(result.Result{Key: k, Status: result.Succeeded}, SectionOptions{})
		info, err := ParseSection(s)
		if err != nil || info.Key != k {
			t.Errorf("key %q: got %q, %v", k, info.Key, err)
		}
		marker := strings.SplitN(s, "\n", 2)[0]
		if strings.Contains(marker[4:len(marker)-3], "--") {
			t.Errorf("marker %q holds --", marker)
		}
		data := strings.SplitN(s, "\n", 3)[1]
		if inner := data[len("<!--") : len(data)-len("-->")]; strings.Contains(inner, "--") || strings.Contains(inner, ">") {
			t.Errorf("data line %q breaks the HTML comment", data)
		}
	}
}
