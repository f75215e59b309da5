package export

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Target is the kind of object a value goes to.
type Target string

const (
	// ConfigMap holds plain values.
	ConfigMap Target = "ConfigMap"
	// Secret holds any value, secret or not.
	Secret Target = "Secret"
)

// Mapping puts one output, or a value inside it, under a key of one object.
type Mapping struct {
	// Key is the key in the object.
	Key string
	// Output names the Stack output.
	Output string
	// Path, when set, selects a value inside the output: fields of maps
	// and indexes of lists, as "db.hosts[0].name" (ParsePath).
	Path string
	// To is the object: ConfigMap or Secret.
	To Target
}

// Outputs are a Stack's outputs as its outputs Secret holds them: each
// value's JSON, and which outputs are Pulumi secrets.
type Outputs struct {
	Values  map[string]json.RawMessage
	Secrets map[string]bool
}

// Data is what the objects get: each key's value, as a string.
type Data struct {
	ConfigMap map[string]string
	Secret    map[string]string
}

// RefusedError says why nothing is written: a secret output mapped into the
// ConfigMap (found only once an update reveals which outputs are secret),
// or a mapping that does not fit the outputs.
type RefusedError struct {
	// Output is the output the refusal is about.
	Output string
	msg    string
}

func (e *RefusedError) Error() string { return e.msg }

// Render maps the outputs: strings as they are, other scalars and whole
// objects or lists as JSON. A secret output (or any value inside one) goes
// only to the Secret: a mapping that would put it in the ConfigMap refuses
// the whole render, naming the output and never its value, so that nothing
// of the ConfigMap is written with it. A missing output or path refuses too.
func Render(out Outputs, mappings []Mapping) (Data, error) {
	d := Data{ConfigMap: map[string]string{}, Secret: map[string]string{}}
	for _, m := range mappings {
		raw, ok := out.Values[m.Output]
		if !ok {
			return Data{}, &RefusedError{Output: m.Output, msg: fmt.Sprintf("key %q: the Stack has no output %q", m.Key, m.Output)}
		}
		if m.To != Secret && out.Secrets[m.Output] {
			return Data{}, &RefusedError{Output: m.Output, msg: fmt.Sprintf("key %q: output %q is a secret, which goes only to the Secret, never to the ConfigMap: map it with to: Secret", m.Key, m.Output)}
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return Data{}, &RefusedError{Output: m.Output, msg: fmt.Sprintf("key %q: output %q is not JSON", m.Key, m.Output)}
		}
		if m.Path != "" {
			path, err := ParsePath(m.Path)
			if err != nil {
				return Data{}, &RefusedError{Output: m.Output, msg: fmt.Sprintf("key %q: %v", m.Key, err)}
			}
			if v, err = path.Select(v); err != nil {
				if out.Secrets[m.Output] {
					// Where a path misses says something of the value (a
					// list's length, a map's fields): of a secret, the
					// refusal, shown in status and events, says nothing.
					return Data{}, &RefusedError{Output: m.Output, msg: fmt.Sprintf("key %q: path %q does not fit the value of output %q (a secret: its shape is not shown)", m.Key, m.Path, m.Output)}
				}
				return Data{}, &RefusedError{Output: m.Output, msg: fmt.Sprintf("key %q: output %q: %v", m.Key, m.Output, err)}
			}
		}
		s, err := text(v)
		if err != nil {
			return Data{}, &RefusedError{Output: m.Output, msg: fmt.Sprintf("key %q: output %q: %v", m.Key, m.Output, err)}
		}
		target := d.ConfigMap
		if m.To == Secret {
			target = d.Secret
		}
		if _, dup := target[m.Key]; dup {
			return Data{}, &RefusedError{Output: m.Output, msg: fmt.Sprintf("key %q is mapped twice in the %s", m.Key, m.To)}
		}
		target[m.Key] = s
	}
	return d, nil
}

// text is a value as an object's data holds it.
func text(v any) (string, error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

// Hash is the content hash of an object's data (sorted keys, each key and
// value length-prefixed), for an annotation a consumer's rollout follows:
// equal data, equal hash, whatever the order the data was built in. With a
// key it is an HMAC-SHA256, for a Secret's data: its hash, shown in the
// Stack's status and events to whoever reads Stacks, then reveals nothing
// of a guessable value without the key; without one a plain SHA-256, which
// anyone reading the ConfigMap can recompute.
func Hash(key []byte, data map[string]string) string {
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	if key != nil {
		h = hmac.New(sha256.New, key)
	}
	for _, k := range keys {
		fmt.Fprintf(h, "%d:%s%d:%s", len(k), k, len(data[k]), data[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Path selects a value inside an output: map fields and list indexes.
type Path []Step

// Step is a map field (Field) or a list index (Index, when IsIndex).
type Step struct {
	Field   string
	Index   int
	IsIndex bool
}

// maxPath bounds a path (its text and its steps).
const maxPath = 256

// ParsePath reads "a.b[0].c": fields separated by dots, each optionally
// followed by list indexes in brackets; a field with other characters is
// written in brackets as a quoted string (["a.b"]).
func ParsePath(s string) (Path, error) {
	if s == "" || len(s) > maxPath {
		return nil, fmt.Errorf("path %q: give 1 to %d characters", cut(s), maxPath)
	}
	var p Path
	i := 0
	expectField := true
	for i < len(s) {
		switch {
		case s[i] == '[':
			j := strings.IndexByte(s[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("path %q: [ at %d is not closed", cut(s), i)
			}
			inner := s[i+1 : i+j]
			if strings.HasPrefix(inner, `"`) {
				f, err := strconv.Unquote(inner)
				if err != nil {
					return nil, fmt.Errorf("path %q: %s at %d is not a quoted field", cut(s), inner, i)
				}
				p = append(p, Step{Field: f})
			} else {
				n, err := strconv.Atoi(inner)
				if err != nil || n < 0 || inner != strconv.Itoa(n) {
					return nil, fmt.Errorf("path %q: [%s] at %d is not a list index", cut(s), inner, i)
				}
				p = append(p, Step{Index: n, IsIndex: true})
			}
			i += j + 1
			expectField = false
		case s[i] == '.':
			if expectField {
				return nil, fmt.Errorf("path %q: a field is missing at %d", cut(s), i)
			}
			i++
			expectField = true
			if i == len(s) {
				return nil, fmt.Errorf("path %q ends with a dot", cut(s))
			}
		default:
			if !expectField {
				return nil, fmt.Errorf("path %q: expected . or [ at %d", cut(s), i)
			}
			j := i
			for j < len(s) && s[j] != '.' && s[j] != '[' {
				j++
			}
			p = append(p, Step{Field: s[i:j]})
			i = j
			expectField = false
		}
	}
	return p, nil
}

// Select follows the path in a decoded JSON value.
func (p Path) Select(v any) (any, error) {
	for n, st := range p {
		switch x := v.(type) {
		case map[string]any:
			if st.IsIndex {
				return nil, fmt.Errorf("step %d is a list index, but the value there is a map", n+1)
			}
			val, ok := x[st.Field]
			if !ok {
				return nil, fmt.Errorf("no field %q at step %d", st.Field, n+1)
			}
			v = val
		case []any:
			if !st.IsIndex {
				return nil, fmt.Errorf("step %d is field %q, but the value there is a list", n+1, st.Field)
			}
			if st.Index >= len(x) {
				return nil, fmt.Errorf("index %d at step %d is past the list's %d items", st.Index, n+1, len(x))
			}
			v = x[st.Index]
		default:
			return nil, fmt.Errorf("step %d goes into a value that is neither a map nor a list", n+1)
		}
	}
	return v, nil
}

func cut(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
