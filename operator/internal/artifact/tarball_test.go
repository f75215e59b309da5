package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

type entry struct {
	hdr  *tar.Header
	data string
}

func untar(t *testing.T, b []byte) (*gzip.Header, []entry) {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var out []entry
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return &gz.Header, out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, entry{hdr, string(data)})
	}
}

func TestTarGzIsDeterministic(t *testing.T) {
	// Maps built in different orders, at different times.
	a := map[string][]byte{}
	for _, n := range []string{"Pulumi.yaml", "b/z.txt", "a.txt", "b/a.txt"} {
		a[n] = []byte("content of " + n)
	}
	first, err := TarGz(a)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // a tarball stamped with the clock would now differ
	b := map[string][]byte{}
	for _, n := range []string{"b/a.txt", "a.txt", "Pulumi.yaml", "b/z.txt"} {
		b[n] = []byte("content of " + n)
	}
	second, err := TarGz(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) || Digest(first) != Digest(second) {
		t.Fatal("the same files gave different tarballs")
	}
	b["a.txt"] = []byte("changed")
	third, err := TarGz(b)
	if err != nil {
		t.Fatal(err)
	}
	if Digest(third) == Digest(first) {
		t.Fatal("different files gave the same digest")
	}

	gzh, entries := untar(t, first)
	if gzh.Name != "" || !gzh.ModTime.IsZero() {
		t.Errorf("gzip header carries name %q, time %v", gzh.Name, gzh.ModTime)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.hdr.Name)
		h := e.hdr
		if h.Typeflag != tar.TypeReg || h.Mode != 0o644 || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" ||
			!h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("entry %s: type %c mode %o uid %d gid %d user %q group %q mtime %v", h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
		if e.data != "content of "+h.Name {
			t.Errorf("entry %s holds %q", h.Name, e.data)
		}
	}
	if got := strings.Join(names, ","); got != "Pulumi.yaml,a.txt,b/a.txt,b/z.txt" {
		t.Fatalf("entries = %s, want sorted by name", got)
	}
}

func TestTarGzEmpty(t *testing.T) {
	b, err := TarGz(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, entries := untar(t, b); len(entries) != 0 {
		t.Fatalf("entries = %v", entries)
	}
}

func TestTarGzRefusesBadNames(t *testing.T) {
	for _, tc := range []struct {
		files map[string][]byte
		want  string
	}{
		{map[string][]byte{"": nil}, "not a clean relative path"},
		{map[string][]byte{".": nil}, "not a clean relative path"},
		{map[string][]byte{"/etc/passwd": nil}, "not a clean relative path"},
		{map[string][]byte{"a/../b": nil}, "not a clean relative path"},
		{map[string][]byte{"a/": nil}, "not a clean relative path"},
		{map[string][]byte{"./a": nil}, "not a clean relative path"},
		{map[string][]byte{"..": nil}, "escapes the tarball"},
		{map[string][]byte{"../a": nil}, "escapes the tarball"},
		{map[string][]byte{`a\..\b`: nil}, "backslash or NUL"},
		{map[string][]byte{"a\x00b": nil}, "backslash or NUL"},
		{map[string][]byte{"a": nil, "a/b": nil}, `"a" is a file, not a directory`},
		{map[string][]byte{strings.Repeat("n", 300): nil}, "tar entry"},
	} {
		if _, err := TarGz(tc.files); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("TarGz(%q): %v, want an error containing %q", keys(tc.files), err, tc.want)
		}
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
