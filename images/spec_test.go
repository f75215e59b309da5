package images

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSpecValidate(t *testing.T) {
	ok := func() Spec {
		return Spec{Name: "x", Entrypoint: []string{"/x"}, Binaries: []Binary{{Package: "./cmd/x", Path: "/x"}}}
	}
	for _, tc := range []struct {
		name   string
		modify func(*Spec)
		want   string // substring of the error; "" means valid
	}{
		{"valid", func(*Spec) {}, ""},
		{"uppercase name", func(s *Spec) { s.Name = "X" }, "lowercase"},
		{"name with slash", func(s *Spec) { s.Name = "a/b" }, "lowercase"},
		{"no entrypoint", func(s *Spec) { s.Entrypoint = nil }, "no entrypoint"},
		{"relative package", func(s *Spec) { s.Binaries[0].Package = "cmd/x" }, "relative to the module root"},
		{"relative path", func(s *Spec) { s.Binaries[0].Path = "x" }, "absolute"},
		{"unclean path", func(s *Spec) { s.Binaries[0].Path = "/a/../x" }, "absolute and clean"},
		{"path twice", func(s *Spec) { s.Dirs = []Dir{{Path: "/x"}} }, "given twice"},
		{"base layer path", func(s *Spec) { s.Files = []File{{Path: "/etc/passwd", Content: []byte("")}} }, "base layer"},
		{"file without content", func(s *Spec) { s.Files = []File{{Path: "/f"}} }, "exactly one"},
		{"file with both", func(s *Spec) { s.Files = []File{{Path: "/f", Content: []byte("a"), Source: "/etc/hosts"}} }, "exactly one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok()
			tc.modify(&s)
			err := s.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestStackflowSpecsAreValid(t *testing.T) {
	for _, s := range Stackflow() {
		if err := s.Validate(); err != nil {
			t.Error(err)
		}
	}
	// The pod runtime's init container runs /agent from the operator image.
	op, err := Select(Stackflow(), []string{"stackflow-operator"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, b := range op[0].Binaries {
		found = found || (b.Path == "/agent" && b.Package == "./operator/cmd/agent")
	}
	if !found {
		t.Errorf("the operator image has no agent at /agent: %+v", op[0].Binaries)
	}
}

func TestSelect(t *testing.T) {
	specs := []Spec{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	names := func(ss []Spec) []string {
		var n []string
		for _, s := range ss {
			n = append(n, s.Name)
		}
		return n
	}
	all, err := Select(specs, nil)
	if err != nil || !cmp.Equal(names(all), []string{"a", "b", "c"}) {
		t.Errorf("Select(nil) = %v, %v", names(all), err)
	}
	some, err := Select(specs, []string{"c", "a"})
	if err != nil || !cmp.Equal(names(some), []string{"c", "a"}) {
		t.Errorf("Select(c,a) = %v, %v", names(some), err)
	}
	if _, err := Select(specs, []string{"d"}); err == nil || !strings.Contains(err.Error(), "known: a, b, c") {
		t.Errorf("Select(d) error %v", err)
	}
}

func TestParsePlatforms(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  bool
	}{
		{in: "linux/amd64,linux/arm64", want: []string{"linux/amd64", "linux/arm64"}},
		{in: " linux/arm64 ", want: []string{"linux/arm64"}},
		{in: "linux/arm/v7", want: []string{"linux/arm/v7"}},
		{in: "", err: true},
		{in: "linux", err: true},
		{in: "linux/amd64,linux/amd64", err: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			ps, err := ParsePlatforms(tc.in)
			if tc.err {
				if err == nil {
					t.Fatalf("no error, got %v", ps)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range ps {
				got = append(got, p.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Error(diff)
			}
		})
	}
}

func TestValidVersion(t *testing.T) {
	for v, ok := range map[string]bool{
		"v1.2.3": true, "ab922e2-dirty": true, "v0.1.0-3-gab922e2": true, "latest": true,
		"": false, "-x": false, "v1+meta": false, "a b": false, strings.Repeat("a", 129): false,
	} {
		if err := ValidVersion(v); (err == nil) != ok {
			t.Errorf("ValidVersion(%q) = %v, want ok=%v", v, err, ok)
		}
	}
}

func TestMergeEnvReplacesByName(t *testing.T) {
	got := mergeEnv([]string{"PATH=/bin", "A=1"}, []string{"PATH=/x:/bin", "B=2"})
	want := []string{"A=1", "PATH=/x:/bin", "B=2"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("mergeEnv = %q, want %q", got, want)
	}
}
