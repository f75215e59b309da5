package artifact

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func newStore(t testing.TB) *Store {
	t.Helper()
	return &Store{Dir: filepath.Join(t.TempDir(), "artifacts"), BaseURL: "http://artifacts.example:9090/"}
}

// files lists the names in an object's directory.
func files(t testing.TB, s *Store, kind, ns, name string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(s.Dir, kind, ns, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestPutReturnsContentAddressedArtifact(t *testing.T) {
	s := newStore(t)
	data := []byte("program one")
	a, err := s.Put("programs", "team-a", "web", data)
	if err != nil {
		t.Fatal(err)
	}
	// printf 'program one' | sha256sum
	const hexWant = "e6de0aba8c0032959303d51951175a4b2146f7c345c59614a2a669e4295b3c70"
	want := "sha256:" + hexWant
	if Digest(data) != want {
		t.Fatalf("Digest = %q, want %q", Digest(data), want)
	}
	if a.Digest != want || a.Size != int64(len(data)) {
		t.Fatalf("artifact = %+v, want digest %s size %d", a, want, len(data))
	}
	if a.Path != "programs/team-a/web/"+hexWant+".tar.gz" {
		t.Fatalf("path = %q", a.Path)
	}
	if a.URL != "http://artifacts.example:9090/"+a.Path {
		t.Fatalf("url = %q (the base URL's trailing slash must not double)", a.URL)
	}
	got, err := os.ReadFile(filepath.Join(s.Dir, filepath.FromSlash(a.Path)))
	if err != nil || string(got) != "program one" {
		t.Fatalf("stored file = %q, %v", got, err)
	}
	fi, err := os.Stat(filepath.Join(s.Dir, filepath.FromSlash(a.Path)))
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("stored file mode = %v, %v", fi.Mode(), err)
	}
}

func TestPutSameContentIsIdempotent(t *testing.T) {
	s := newStore(t)
	a1, err := s.Put("programs", "ns", "web", []byte("same"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(s.Dir, filepath.FromSlash(a1.Path))
	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(file, past, past); err != nil {
		t.Fatal(err)
	}
	a2, err := s.Put("programs", "ns", "web", []byte("same"))
	if err != nil {
		t.Fatal(err)
	}
	if a1 != a2 {
		t.Fatalf("same content, different artifacts: %+v vs %+v", a1, a2)
	}
	if fi, _ := os.Stat(file); !fi.ModTime().Equal(past) {
		t.Fatalf("the same content was rewritten (mtime %v)", fi.ModTime())
	}
	if got := files(t, s, "programs", "ns", "web"); len(got) != 1 {
		t.Fatalf("files after two puts of the same content = %v", got)
	}

	// A damaged file under the content's name is replaced.
	if err := os.WriteFile(file, []byte("damaged"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put("programs", "ns", "web", []byte("same")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(file); string(got) != "same" {
		t.Fatalf("damaged artifact not repaired: %q", got)
	}
}

func TestPrune(t *testing.T) {
	s := newStore(t)
	old, err := s.Put("programs", "ns", "web", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := s.Put("programs", "ns", "web", []byte("v2"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Put("programs", "ns", "api", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(s.Dir, "programs", "ns", "web")
	// A write interrupted by a crash, and a file the store does not own.
	for _, n := range []string{".tmp-123", "README"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Prune("programs", "ns", "web", cur.Digest); err != nil {
		t.Fatal(err)
	}
	want := []string{"README", filepath.Base(cur.Path)}
	slices.Sort(want)
	if got := files(t, s, "programs", "ns", "web"); !slices.Equal(got, want) {
		t.Fatalf("after prune: %v, want %v (old %s gone)", got, want, filepath.Base(old.Path))
	}
	if got := files(t, s, "programs", "ns", "api"); !slices.Equal(got, []string{filepath.Base(other.Path)}) {
		t.Fatalf("prune touched another object: %v", got)
	}
	// Keeping nothing removes every artifact.
	if err := s.Prune("programs", "ns", "web", ""); err != nil {
		t.Fatal(err)
	}
	if got := files(t, s, "programs", "ns", "web"); !slices.Equal(got, []string{"README"}) {
		t.Fatalf("after prune of all: %v", got)
	}
	// An object without artifacts is not an error.
	if err := s.Prune("programs", "ns", "never", ""); err != nil {
		t.Fatalf("prune of an object without artifacts: %v", err)
	}
	if err := s.Prune("programs", "ns", "web", "md5:abc"); err == nil || !strings.Contains(err.Error(), "sha256:<64 hex digits>") {
		t.Fatalf("prune with a malformed digest to keep: %v", err)
	}
}

func TestRemove(t *testing.T) {
	s := newStore(t)
	for _, c := range []string{"v1", "v2"} {
		if _, err := s.Put("programs", "ns", "web", []byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	other, err := s.Put("programs", "ns", "api", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("programs", "ns", "web"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "programs", "ns", "web")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("object directory still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, filepath.FromSlash(other.Path))); err != nil {
		t.Fatalf("remove touched another object: %v", err)
	}
	if err := s.Remove("programs", "ns", "web"); err != nil {
		t.Fatalf("second remove: %v", err)
	}
}

func TestObjectNamesAreChecked(t *testing.T) {
	for _, tc := range []struct{ kind, ns, name string }{
		{"programs", "ns", ".."},
		{"programs", "..", "web"},
		{"..", "ns", "web"},
		{"programs", "ns", "."},
		{"programs", "ns", "a/b"},
		{"programs", "ns", "../../etc"},
		{"programs", "ns", ""},
		{"programs", "", "web"},
		{"Programs", "ns", "web"},
		{"programs", "ns", "web\x00"},
		{"programs", "ns", `a\b`},
		{"programs", "ns", strings.Repeat("a", 254)},
	} {
		s := newStore(t)
		if _, err := s.Put(tc.kind, tc.ns, tc.name, []byte("x")); err == nil {
			t.Errorf("Put(%q, %q, %q) accepted", tc.kind, tc.ns, tc.name)
		}
		if err := s.Prune(tc.kind, tc.ns, tc.name, ""); err == nil {
			t.Errorf("Prune(%q, %q, %q) accepted", tc.kind, tc.ns, tc.name)
		}
		if err := s.Remove(tc.kind, tc.ns, tc.name); err == nil {
			t.Errorf("Remove(%q, %q, %q) accepted", tc.kind, tc.ns, tc.name)
		}
	}
	if _, err := (&Store{}).Put("programs", "ns", "web", nil); err == nil {
		t.Error("a store without a directory accepted an artifact")
	}
}
