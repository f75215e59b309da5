// Package leaks searches what a product wrote (statuses, events, logs, HTTP
// answers) for secret values a test planted, with one rule for what counts
// as a leak, shared by every suite that plants secrets (operator/test/secrets,
// operator/test/clustere2e).
//
// The rule. A planted value must be at least MinLength bytes (a shorter one
// would match by chance; Search refuses it). It has leaked when a text
// contains any of these forms of it:
//
//   - the value itself;
//   - for a value of at least 2*Window bytes, any Window-byte part of it: a
//     value cut short (a message truncated inside it) or masked in part
//     still leaks that much;
//   - the value as JSON escapes it inside a string, with and without HTML
//     escaping (`"`, `\`, control characters, `<`, `>`, `&`), where that
//     differs from the value;
//   - the value percent-encoded as a URL query or path escapes it, where
//     that differs (a credential in a URL);
//   - the value base64-encoded, standard and URL alphabets, at each of the
//     three alignments it can have inside a longer encoded text (a Secret's
//     data, a basic-auth header): the encoding of its whole 3-byte groups
//     from offset 0, 1 and 2, which any base64 text holding the value
//     contains.
//
// Parts are searched in clear only: a part of an encoded value is not.
//
// It imports only the standard library.
package leaks

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"testing"
)

const (
	// MinLength is the shortest value Search accepts, in bytes.
	MinLength = 12
	// Window is the length of the parts of a long value searched for.
	Window = 12
)

// Leak is one form of a planted value found in one text.
type Leak struct {
	// Text is the name of the text it was found in.
	Text string
	// Form says which form was found: "value", "part", "json", "url
	// query", "url path", "base64" or "base64url".
	Form string
	// Found is what was found; Context the text around it.
	Found, Context string
}

func (l Leak) String() string {
	return fmt.Sprintf("%q (%s of a planted secret) appears in %s: …%s…", l.Found, l.Form, l.Text, l.Context)
}

// form is one needle of a value.
type form struct{ name, needle string }

// forms are the needles searched for value (see the package doc), or an
// error for a value shorter than MinLength.
func forms(value string) ([]form, error) {
	if len(value) < MinLength {
		return nil, fmt.Errorf("a planted value of %d bytes is too short to search for without chance matches: plant one of %d bytes or more", len(value), MinLength)
	}
	var out []form
	seen := map[string]bool{}
	add := func(name, needle string) {
		if needle != "" && !seen[needle] {
			seen[needle] = true
			out = append(out, form{name, needle})
		}
	}
	add("value", value)
	if len(value) >= 2*Window {
		for i := 0; i+Window <= len(value); i++ {
			add("part", value[i:i+Window])
		}
	}
	add("json", jsonEscaped(value, true))
	add("json", jsonEscaped(value, false))
	add("url query", url.QueryEscape(value))
	add("url path", url.PathEscape(value))
	for _, enc := range []struct {
		name string
		e    *base64.Encoding
	}{{"base64", base64.StdEncoding}, {"base64url", base64.URLEncoding}} {
		for k := range 3 {
			whole := (len(value) - k) / 3 * 3
			add(enc.name, enc.e.EncodeToString([]byte(value[k:k+whole])))
		}
	}
	return out, nil
}

// jsonEscaped is value as it stands between the quotes of a JSON string.
func jsonEscaped(value string, html bool) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(html)
	_ = e.Encode(value)
	s := strings.TrimSuffix(b.String(), "\n")
	return s[1 : len(s)-1]
}

// Search returns every leak of values in texts (name → text), at most one
// per value and text (the first form found, in the order of the package doc), sorted
// by text name.
func Search(values []string, texts map[string]string) ([]Leak, error) {
	names := make([]string, 0, len(texts))
	for n := range texts {
		names = append(names, n)
	}
	sort.Strings(names)
	var leaks []Leak
	for _, v := range values {
		fs, err := forms(v)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			text := texts[n]
			for _, f := range fs {
				if i := strings.Index(text, f.needle); i >= 0 {
					leaks = append(leaks, Leak{Text: n, Form: f.name, Found: f.needle,
						Context: text[max(0, i-80):min(len(text), i+len(f.needle)+20)]})
					break
				}
			}
		}
	}
	return leaks, nil
}

// AssertNone fails t for every leak of values in texts, and at once for a
// value too short to search for.
func AssertNone(t testing.TB, values []string, texts map[string]string) {
	t.Helper()
	leaks, err := Search(values, texts)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leaks {
		t.Error(l.String())
	}
}
