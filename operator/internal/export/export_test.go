package export

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

var outputs = Outputs{
	Values: map[string]json.RawMessage{
		"endpoint": json.RawMessage(`"db.internal:5432"`),
		"port":     json.RawMessage(`5432`),
		"db":       json.RawMessage(`{"hosts":[{"name":"a","zone":"x"},{"name":"b"}],"tls":true,"odd.key":"v"}`),
		"password": json.RawMessage(`"hunter2-secret"`),
		"creds":    json.RawMessage(`{"user":"app-login-secret","token":"tok-secret"}`),
	},
	Secrets: map[string]bool{"password": true, "creds": true},
}

func TestRender(t *testing.T) {
	for _, tt := range []struct {
		name     string
		mappings []Mapping
		want     Data
		refused  string // the output named; "" when it renders
		msg      string
	}{
		{"plain values to the ConfigMap", []Mapping{{Key: "ENDPOINT", Output: "endpoint", To: ConfigMap}, {Key: "PORT", Output: "port", To: ConfigMap}},
			Data{ConfigMap: map[string]string{"ENDPOINT": "db.internal:5432", "PORT": "5432"}, Secret: map[string]string{}}, "", ""},
		{"a value inside a map and list", []Mapping{{Key: "host", Output: "db", Path: "hosts[1].name", To: ConfigMap}, {Key: "odd", Output: "db", Path: `["odd.key"]`, To: ConfigMap}},
			Data{ConfigMap: map[string]string{"host": "b", "odd": "v"}, Secret: map[string]string{}}, "", ""},
		{"a whole object as JSON", []Mapping{{Key: "db.json", Output: "db", Path: "hosts[0]", To: ConfigMap}},
			Data{ConfigMap: map[string]string{"db.json": `{"name":"a","zone":"x"}`}, Secret: map[string]string{}}, "", ""},
		{"a secret to the Secret", []Mapping{{Key: "PASSWORD", Output: "password", To: Secret}, {Key: "token", Output: "creds", Path: "token", To: Secret}},
			Data{ConfigMap: map[string]string{}, Secret: map[string]string{"PASSWORD": "hunter2-secret", "token": "tok-secret"}}, "", ""},
		{"a plain value to the Secret", []Mapping{{Key: "ENDPOINT", Output: "endpoint", To: Secret}},
			Data{ConfigMap: map[string]string{}, Secret: map[string]string{"ENDPOINT": "db.internal:5432"}}, "", ""},
		{"a secret to the ConfigMap", []Mapping{{Key: "ENDPOINT", Output: "endpoint", To: ConfigMap}, {Key: "PASSWORD", Output: "password", To: ConfigMap}},
			Data{}, "password", `output "password" is a secret, which goes only to the Secret`},
		{"a value inside a secret to the ConfigMap", []Mapping{{Key: "user", Output: "creds", Path: "user", To: ConfigMap}},
			Data{}, "creds", "never to the ConfigMap"},
		{"a missing output", []Mapping{{Key: "X", Output: "nope", To: ConfigMap}}, Data{}, "nope", `the Stack has no output "nope"`},
		{"a missing field", []Mapping{{Key: "X", Output: "db", Path: "hosts[0].port", To: ConfigMap}}, Data{}, "db", `no field "port" at step 3`},
		{"an index past the list", []Mapping{{Key: "X", Output: "db", Path: "hosts[2]", To: ConfigMap}}, Data{}, "db", "past the list's 2 items"},
		{"a path missing inside a secret", []Mapping{{Key: "X", Output: "creds", Path: "tokens[3]", To: Secret}}, Data{}, "creds", `path "tokens[3]" does not fit the value of output "creds" (a secret: its shape is not shown)`},
		{"a key twice", []Mapping{{Key: "X", Output: "port", To: ConfigMap}, {Key: "X", Output: "endpoint", To: ConfigMap}}, Data{}, "endpoint", `key "X" is mapped twice`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Render(outputs, tt.mappings)
			if tt.refused == "" {
				if err != nil || !reflect.DeepEqual(got, tt.want) {
					t.Fatalf("Render = %+v, %v; want %+v", got, err, tt.want)
				}
				return
			}
			var re *RefusedError
			if !errors.As(err, &re) || re.Output != tt.refused || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Render error %v; want a refusal about %q saying %q", err, tt.refused, tt.msg)
			}
			if got.ConfigMap != nil || got.Secret != nil {
				t.Fatalf("a refused render returned data %+v", got)
			}
			for _, secret := range []string{"hunter2-secret", "tok-secret", "app-login-secret"} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the refusal quotes a secret value: %v", err)
				}
			}
		})
	}
}

func TestHash(t *testing.T) {
	a := Hash(nil, map[string]string{"a": "1", "b": "2"})
	if b := Hash(nil, map[string]string{"b": "2", "a": "1"}); a != b {
		t.Fatal("the hash depends on the map's order")
	}
	for _, other := range []map[string]string{{"a": "1", "b": "3"}, {"a": "1"}, {"a": "12", "b": ""}, {"a1": "", "b": "2"}} {
		if Hash(nil, other) == a {
			t.Errorf("%v hashes like {a:1 b:2}", other)
		}
	}
	if len(a) != 64 {
		t.Errorf("hash %q", a)
	}
	keyed := Hash([]byte("k1"), map[string]string{"a": "1", "b": "2"})
	if keyed == a || len(keyed) != 64 || Hash([]byte("k2"), map[string]string{"a": "1", "b": "2"}) == keyed ||
		Hash([]byte("k1"), map[string]string{"b": "2", "a": "1"}) != keyed {
		t.Errorf("keyed hash %q: want one per key, stable, unlike the plain %q", keyed, a)
	}
}

func TestParsePath(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Path
		err  string
	}{
		{"a", Path{{Field: "a"}}, ""},
		{"a.b[0].c", Path{{Field: "a"}, {Field: "b"}, {Index: 0, IsIndex: true}, {Field: "c"}}, ""},
		{"[2][3]", Path{{Index: 2, IsIndex: true}, {Index: 3, IsIndex: true}}, ""},
		{`a["b.c"]`, Path{{Field: "a"}, {Field: "b.c"}}, ""},
		{"", nil, "give 1 to"},
		{"a.", nil, "ends with a dot"},
		{".a", nil, "a field is missing"},
		{"a..b", nil, "a field is missing"},
		{"a[", nil, "is not closed"},
		{"a[-1]", nil, "is not a list index"},
		{"a[01]", nil, "is not a list index"},
		{"a[x]", nil, "is not a list index"},
		{`a["b]`, nil, "not a quoted field"},
		{"a[0]b", nil, "expected . or ["},
		{strings.Repeat("a", maxPath+1), nil, "give 1 to"},
	} {
		got, err := ParsePath(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParsePath(%q) = %v, %v; want an error saying %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParsePath(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

// FuzzParsePath: any input parses or is refused, without panicking; a
// parsed path has at least one step, each a field or a non-negative index,
// and selecting it from any value never panics.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"a", "a.b[0].c", `a["b.c"]`, "[1]", "a[", "..", `["\u00e9"]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePath(s)
		if err != nil {
			return
		}
		if len(p) == 0 {
			t.Fatalf("ParsePath(%q) gave no steps", s)
		}
		for _, st := range p {
			if st.IsIndex && st.Index < 0 {
				t.Fatalf("ParsePath(%q) gave index %d", s, st.Index)
			}
		}
		var v any
		_ = json.Unmarshal([]byte(`{"a":{"b":[{"c":1}]},"b.c":[1,2]}`), &v)
		_, _ = p.Select(v)
	})
}
