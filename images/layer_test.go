package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// tarHeaders reads back a layer's entries as "name mode uid:gid size".
func tarHeaders(t *testing.T, l v1.Layer) ([]string, []*tar.Header) {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var lines []string
	var hdrs []*tar.Header
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.Join([]string{h.Name, fmt.Sprintf("%#o", h.Mode), fmt.Sprintf("%d:%d", h.Uid, h.Gid), fmt.Sprint(h.Size)}, " "))
		hdrs = append(hdrs, h)
	}
	return lines, hdrs
}

func TestLayerIsSortedWithParentsAndFixedMetadata(t *testing.T) {
	mtime := time.Unix(1700000000, 0)
	entries := []entry{
		{path: "/usr/bin/b", mode: 0o755, content: []byte("bb")},
		{path: "/tmp", dir: true, mode: 0o1777},
		{path: "/etc/x", content: []byte("x")},
		{path: "/home/nonroot", dir: true, mode: 0o700, uid: 65532, gid: 65532},
		{path: "/usr/bin/a", mode: 0o755, content: []byte("a")},
	}
	l, err := layer(entries, mtime)
	if err != nil {
		t.Fatal(err)
	}
	got, hdrs := tarHeaders(t, l)
	want := []string{
		"etc/ 0755 0:0 0",
		"etc/x 0644 0:0 1",
		"home/ 0755 0:0 0",
		"home/nonroot/ 0700 65532:65532 0",
		"tmp/ 01777 0:0 0",
		"usr/ 0755 0:0 0",
		"usr/bin/ 0755 0:0 0",
		"usr/bin/a 0755 0:0 1",
		"usr/bin/b 0755 0:0 2",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	for _, h := range hdrs {
		if !h.ModTime.Equal(mtime) || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: mtime %s uname %q gname %q, want %s and no names", h.Name, h.ModTime, h.Uname, h.Gname, mtime)
		}
	}

	// The same entries in another order give the same bytes.
	reversed := make([]entry, len(entries))
	for i, e := range entries {
		reversed[len(entries)-1-i] = e
	}
	l2, err := layer(reversed, mtime)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := l.Digest()
	d2, _ := l2.Digest()
	if d1 != d2 {
		t.Errorf("digest depends on entry order: %s vs %s", d1, d2)
	}
	// Another time gives another layer.
	l3, err := layer(entries, mtime.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if d3, _ := l3.Digest(); d3 == d1 {
		t.Errorf("digest does not depend on the timestamp")
	}
}

func TestLayerRejects(t *testing.T) {
	for name, entries := range map[string][]entry{
		"duplicate":      {{path: "/a"}, {path: "/a"}},
		"file as parent": {{path: "/a", content: []byte("x")}, {path: "/a/b"}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := layer(entries, time.Unix(0, 0)); err == nil {
				t.Error("no error")
			}
		})
	}
}

func TestBaseEntriesNeedsTheCABundle(t *testing.T) {
	_, err := baseEntries(filepath.Join(t.TempDir(), "missing.crt"))
	if err == nil || !strings.Contains(err.Error(), "ca-certificates") {
		t.Fatalf("error %v, want one naming the ca-certificates package", err)
	}
	empty := filepath.Join(t.TempDir(), "empty.crt")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := baseEntries(empty); err == nil {
		t.Fatal("an empty bundle is accepted")
	}
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	entries, err := baseEntries(ca)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, e := range entries {
		files[e.path] = string(e.content)
	}
	if !strings.Contains(files["/etc/passwd"], "nonroot:x:65532:65532:") || !strings.Contains(files["/etc/group"], "nonroot:x:65532:") {
		t.Errorf("passwd %q group %q lack nonroot 65532", files["/etc/passwd"], files["/etc/group"])
	}
	if !bytes.Equal([]byte(files[CABundlePath]), []byte("-----BEGIN CERTIFICATE-----\n")) {
		t.Errorf("CA bundle not copied")
	}
}

// A fast-compressed layer holds the same tar (the same diff ID) under
// another digest, and is reproducible at its level.
func TestFastLayerHasTheSameContent(t *testing.T) {
	mtime := time.Unix(1700000000, 0)
	entries := []entry{{path: "/bin/x", mode: 0o755, content: bytes.Repeat([]byte("stackflow "), 10000)}}
	def, err := layer(entries, mtime)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := layerAt(entries, mtime, gzip.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	again, err := layerAt(entries, mtime, gzip.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	defDiff, _ := def.DiffID()
	fastDiff, _ := fast.DiffID()
	if defDiff != fastDiff {
		t.Errorf("diff IDs %s (default) and %s (fast) differ", defDiff, fastDiff)
	}
	d1, _ := fast.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("fast layer not reproducible: %s vs %s", d1, d2)
	}
}
