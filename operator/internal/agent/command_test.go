package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// fakePulumi writes a pulumi CLI that answers `version` as 3.274.1 and runs
// install as given (a shell script), and returns its root.
func fakePulumi(t *testing.T, install string) string {
	t.Helper()
	root := t.TempDir()
	script := fmt.Sprintf(`#!/bin/sh
for a in "$@"; do
  case "$a" in
    version) echo v3.274.1; exit 0;;
    install) %s; exit $?;;
  esac
done
echo "unexpected pulumi $*" >&2
exit 1
`, install)
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "pulumi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestInstallPrintingAHugeLine: a `pulumi install` that prints 200 MiB
// without a newline (then a secret, on each stream) leaves the agent's heap
// bounded — the line splitter keeps one capped line, and the CLI's output is
// no longer captured whole beside it (the Automation API's runner kept all
// 200 MiB, more while its buffer doubled) — ends well within the preparation's
// deadline (the old line writer copied everything buffered on each write and
// never finished), and logs the line cut and marked, the secret redacted.
func TestInstallPrintingAHugeLine(t *testing.T) {
	const secret = "registry-token-5e2a77"
	root := fakePulumi(t, `echo "Installing dependencies..."; head -c 209715200 /dev/zero | tr '\0' '#'; echo; echo "token $REGISTRY_TOKEN done"; echo "warning: $REGISTRY_TOKEN" >&2`)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "Pulumi.yaml"), []byte("name: huge\nruntime: yaml\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sink := &msgSink{}
	// The peak heap while the install runs, sampled.
	var peak atomic.Uint64
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > before.HeapAlloc && m.HeapAlloc-before.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc - before.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	start := time.Now()
	_, err := New(context.Background(), logr.New(sink), Options{
		WorkDir: t.TempDir(), PulumiRoot: root, Source: Source{LocalDir: src}, PrepareTimeout: 90 * time.Second,
		Env: map[string]string{"REGISTRY_TOKEN": secret}, SecretEnv: []string{"REGISTRY_TOKEN"},
	})
	elapsed := time.Since(start)
	close(stop)
	<-sampled
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("install of 200 MiB without a newline: %s; heap growth at most %.1f MiB (sampled every 20 ms), %.1f MiB allocated in all",
		elapsed.Round(time.Millisecond), float64(peak.Load())/(1<<20), float64(allocated)/(1<<20))
	if err != nil {
		t.Fatalf("preparation: %v", err)
	}
	if peak.Load() > 32<<20 || allocated > 64<<20 {
		t.Fatalf("the install's output cost the agent %d MiB of heap, %d MiB allocated; want at most 32 and 64", peak.Load()>>20, allocated>>20)
	}
	var install []string
	for _, l := range sink.lines() {
		if strings.HasPrefix(l, "#") || strings.Contains(l, "dependencies...") || strings.Contains(l, "token") || strings.Contains(l, "warning") {
			install = append(install, l)
		}
	}
	want := []string{"Installing dependencies...", strings.Repeat("#", maxLineBytes) + cutMark, "token [secret] done", "warning: [secret]"}
	if len(install) != len(want) || install[0] != want[0] || install[1] != want[1] || !strings.Contains(strings.Join(install[2:], "\n"), want[2]) ||
		!strings.Contains(strings.Join(install[2:], "\n"), want[3]) {
		t.Fatalf("logged %s\nwant %s", abbreviate(install), abbreviate(want))
	}
	if all := strings.Join(sink.lines(), "\n"); strings.Contains(all, secret) {
		t.Fatal("the secret was logged")
	}
}

// TestHeadTail: the captured output of a streamed command is all of it when
// small, else its first and last halves cut at line breaks with a mark.
func TestHeadTail(t *testing.T) {
	lines := func(prefix string, n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "%s %02d\n", prefix, i)
		}
		return b.String()
	}
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"small: all of it", "one\ntwo\n", "one\ntwo\n"},
		{"up to 3 halves: all of it", strings.Repeat("x", 30), strings.Repeat("x", 30)},
		{"over: whole lines of the head and of the last half", lines("first", 10) + lines("last", 10),
			"first 00\nfirst 01\n[136 bytes of output not kept by the agent]\nlast 08\nlast 09\n"},
		{"one endless line: only the mark", strings.Repeat("x", 100), "[100 bytes of output not kept by the agent]\n"},
		{"an endless line then errors", strings.Repeat("x", 100) + "\nerror: boom\n", "[101 bytes of output not kept by the agent]\nerror: boom\n"},
	}
	for _, tc := range tests {
		for _, size := range []int{1, 3, 7, len(tc.in)} {
			t.Run(fmt.Sprintf("%s/writes of %d", tc.name, size), func(t *testing.T) {
				h := &headTail{half: 20}
				for in := tc.in; in != ""; {
					n := min(size, len(in))
					if _, err := h.Write([]byte(in[:n])); err != nil {
						t.Fatal(err)
					}
					in = in[n:]
					if len(h.head) > h.half || len(h.tail) > 2*h.half {
						t.Fatalf("holds %d + %d bytes", len(h.head), len(h.tail))
					}
				}
				if got := h.String(); got != tc.want {
					t.Fatalf("String() = %q, want %q", got, tc.want)
				}
			})
		}
	}
}

// TestCapture: the captured output of a streamed command keeps its lines as
// they were, blank ones too, but for a line over maxLineBytes, cut before a
// secret it would split (not redacted: the agent redacts the error quoting
// it) and marked.
func TestCapture(t *testing.T) {
	const secret = "capture-secret-9f0e"
	red := newRedactor()
	red.add(secret)
	c := newCapture(red)
	long := strings.Repeat("x", maxLineBytes-4) + secret + strings.Repeat("y", 100)
	for _, p := range []string{"one\n\n", "two " + secret + "\r\n", long[:1000], long[1000:], "\nerror: boom\n"} {
		if _, err := c.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	want := "one\n\ntwo " + secret + "\n" + strings.Repeat("x", maxLineBytes-4) + cutMark + "\nerror: boom\n"
	if got := c.String(); got != want {
		t.Fatalf("captured %s\nwant %s", abbreviate(strings.Split(got, "\n")), abbreviate(strings.Split(want, "\n")))
	}
}
