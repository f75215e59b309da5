package agent

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// cutMark ends a line cut at maxLineBytes.
const cutMark = "… [line cut at 65536 bytes]"

// outputWriter is an output writer of the agent under test and what it
// emitted so far.
type outputWriter struct {
	w interface {
		io.Writer
		Flush()
	}
	lines func() []string
}

// outputWriters are the agent's two line writers, each with its sink: the
// event writer of an operation (log events of a run) and the log writer of
// `pulumi install` (agent log lines).
func outputWriters(red *redactor) map[string]func() outputWriter {
	return map[string]func() outputWriter{
		"event writer": func() outputWriter {
			r := &run{notify: make(chan struct{}), done: make(chan struct{})}
			return outputWriter{w: newEventWriter(r, logr.Discard(), red), lines: func() []string {
				r.mu.Lock()
				defer r.mu.Unlock()
				var out []string
				for _, ev := range r.events {
					out = append(out, ev.GetLog())
				}
				return out
			}}
		},
		"log writer": func() outputWriter {
			sink := &msgSink{}
			return outputWriter{w: newLogWriter(logr.New(sink), red, &lastLine{}), lines: sink.lines}
		},
	}
}

// msgSink records the messages logged at info level.
type msgSink struct {
	mu   sync.Mutex
	msgs []string
}

func (s *msgSink) Init(logr.RuntimeInfo)          {}
func (s *msgSink) Enabled(int) bool               { return true }
func (s *msgSink) Error(error, string, ...any)    {}
func (s *msgSink) WithValues(...any) logr.LogSink { return s }
func (s *msgSink) WithName(string) logr.LogSink   { return s }
func (s *msgSink) Info(_ int, msg string, _ ...any) {
	s.mu.Lock()
	s.msgs = append(s.msgs, msg)
	s.mu.Unlock()
}
func (s *msgSink) lines() []string { s.mu.Lock(); defer s.mu.Unlock(); return slices.Clone(s.msgs) }

// TestHugeOutputKeepsMemoryBounded: 200 MiB written without a newline (a
// program or `pulumi install` printing a progress bar with '\r' only, or
// nothing but one endless line) through each of the agent's output writers
// grows the heap by a bounded amount, allocates a bounded amount (the old
// writers copied everything buffered on each write: quadratic), takes time
// linear in the bytes, and comes out as one cut and marked line (or the last
// redraw).
func TestHugeOutputKeepsMemoryBounded(t *testing.T) {
	const (
		total = 200 << 20
		chunk = 32 << 10
		// heapBound and allocBound: what the writer may hold and allocate
		// for 200 MiB; the old ones held all of it, and allocated about
		// 1 GiB for the first 8 MiB.
		heapBound  = 16 << 20
		allocBound = 32 << 20
		checkEvery = 8 << 20
		deadline   = 2 * time.Minute
	)
	endless := bytes.Repeat([]byte("x"), chunk)
	var redraws []byte
	for i := 0; len(redraws) < chunk; i++ {
		redraws = fmt.Appendf(redraws, "downloading plugin %3d%% [%-20s]\r", i%101, strings.Repeat("=", i%21))
	}
	inputs := map[string]struct {
		chunk []byte
		want  func(t *testing.T, lines []string)
	}{
		"one endless line": {endless, func(t *testing.T, lines []string) {
			if len(lines) != 1 || lines[0] != strings.Repeat("x", maxLineBytes)+cutMark {
				t.Fatalf("emitted %d lines (the first %d bytes), want one of %d bytes then %q", len(lines), lenFirst(lines), maxLineBytes, cutMark)
			}
		}},
		"progress redraws": {redraws, func(t *testing.T, lines []string) {
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "downloading plugin") || len(lines[0]) > 64 {
				t.Fatalf("emitted %d lines (the first %d bytes), want the last redraw alone", len(lines), lenFirst(lines))
			}
		}},
	}
	for wname, newWriter := range outputWriters(newRedactor()) {
		for iname, in := range inputs {
			t.Run(wname+"/"+iname, func(t *testing.T) {
				ow := newWriter()
				var before, now runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				start := time.Now()
				var firstHalf time.Duration
				peakHeap := uint64(0)
				for written := 0; written < total; {
					if _, err := ow.w.Write(in.chunk); err != nil {
						t.Fatal(err)
					}
					written += len(in.chunk)
					if written%checkEvery >= len(in.chunk) {
						continue
					}
					runtime.ReadMemStats(&now)
					heap := now.HeapAlloc - min(now.HeapAlloc, before.HeapAlloc)
					peakHeap = max(peakHeap, heap)
					alloc := now.TotalAlloc - before.TotalAlloc
					if heap > heapBound || alloc > allocBound {
						t.Fatalf("after %d MiB the heap grew by %d MiB and %d MiB were allocated; want at most %d and %d",
							written>>20, heap>>20, alloc>>20, heapBound>>20, allocBound>>20)
					}
					if el := time.Since(start); el > deadline {
						t.Fatalf("writing %d MiB took %s", written>>20, el)
					}
					if firstHalf == 0 && written >= total/2 {
						firstHalf = time.Since(start)
					}
				}
				if _, err := ow.w.Write([]byte("\n")); err != nil {
					t.Fatal(err)
				}
				ow.w.Flush()
				elapsed := time.Since(start)
				runtime.ReadMemStats(&now)
				secondHalf := elapsed - firstHalf
				t.Logf("200 MiB in %s (%.0f MiB/s; halves %s and %s); heap growth at most %.1f MiB, %.1f MiB allocated in all",
					elapsed.Round(time.Millisecond), float64(total>>20)/elapsed.Seconds(), firstHalf.Round(time.Millisecond),
					secondHalf.Round(time.Millisecond), float64(peakHeap)/(1<<20), float64(now.TotalAlloc-before.TotalAlloc)/(1<<20))
				// Linear: the second 100 MiB take about as long as the
				// first (quadratic copying, three times as long); the slack
				// absorbs a busy machine.
				if secondHalf > 2*firstHalf+time.Second {
					t.Fatalf("the second half took %s, the first %s: not linear", secondHalf, firstHalf)
				}
				in.want(t, ow.lines())
			})
		}
	}
}

func lenFirst(lines []string) int {
	if len(lines) == 0 {
		return 0
	}
	return len(lines[0])
}

// TestOutputLines: how the writers split, cut, redraw and redact, whatever
// the write boundaries.
func TestOutputLines(t *testing.T) {
	const secret = "hunter2-deploy-key-0c1d"
	long := strings.Repeat("0123456789abcdef", 200<<10/16) // longer than the look-ahead
	red := newRedactor()
	red.add(secret, long)
	pad := func(n int) string { return strings.Repeat("x", n) }
	tests := []struct {
		name, in string
		want     []string
	}{
		{"lines, blank ones dropped", "one\n\n  \ntwo\n", []string{"one", "two"}},
		{"a partial last line is flushed", "one\ntw", []string{"one", "tw"}},
		{"a secret is redacted whole", "token " + secret + " refused\n", []string{"token [secret] refused"}},
		{"CRLF ends a line", "one\r\ntwo\r\n", []string{"one", "two"}},
		{"a redraw replaces the line", "get 1%\rget 50%\rget 100%\ndone\n", []string{"get 100%", "done"}},
		{"repeated carriage returns before a newline", "done\r\r\n", []string{"done"}},
		{"a redraw left at the end is the last output", "get 1%\rget 7%", []string{"get 7%"}},
		{"a secret overwritten by a redraw never shows", "token " + secret + "\rok\n", []string{"ok"}},
		{"a line at the cap is whole", pad(maxLineBytes) + "\n", []string{pad(maxLineBytes)}},
		{"a line over the cap is cut and marked, its rest dropped", pad(maxLineBytes+1) + "\nnext\n", []string{pad(maxLineBytes) + cutMark, "next"}},
		{"an endless line is cut once", pad(3*maxLineBytes) + "\nnext\n", []string{pad(maxLineBytes) + cutMark, "next"}},
		{"a redraw after a cut is a line of its own", pad(3*maxLineBytes) + "\r100%\n", []string{pad(maxLineBytes) + cutMark, "100%"}},
		{
			"a secret straddling the cut is cut before, not split",
			pad(maxLineBytes-5) + secret + pad(10) + "\n",
			[]string{pad(maxLineBytes-5) + cutMark},
		},
		{
			"a secret straddling the cut of an endless line is cut before",
			pad(maxLineBytes-5) + secret + pad(3*maxLineBytes),
			[]string{pad(maxLineBytes-5) + cutMark},
		},
		{
			"a secret longer than the look-ahead straddling the cut: its start is masked",
			pad(maxLineBytes-100) + long + "\n",
			[]string{pad(maxLineBytes-100) + "[secret]" + cutMark},
		},
		{
			"secrets before the cut are redacted, the line measured before redaction",
			secret + " " + pad(maxLineBytes) + "\n",
			[]string{"[secret] " + pad(maxLineBytes-len(secret)-1) + cutMark},
		},
	}
	for _, tc := range tests {
		for wname, newWriter := range outputWriters(red) {
			for _, size := range []int{1, 7, 4096, len(tc.in)} {
				t.Run(fmt.Sprintf("%s/%s/writes of %d", tc.name, wname, size), func(t *testing.T) {
					ow := newWriter()
					for in := tc.in; in != ""; {
						n := min(size, len(in))
						if _, err := ow.w.Write([]byte(in[:n])); err != nil {
							t.Fatal(err)
						}
						in = in[n:]
					}
					ow.w.Flush()
					got := ow.lines()
					if !slices.Equal(got, tc.want) {
						t.Fatalf("lines = %s\nwant    %s", abbreviate(got), abbreviate(tc.want))
					}
					for _, l := range got {
						if strings.Contains(l, secret[:6]) || strings.Contains(l, long[:8]) {
							t.Fatalf("a secret's start leaked: %s", abbreviate([]string{l}))
						}
					}
				})
			}
		}
	}
}

// abbreviate shows lines with their long runs of one byte counted.
func abbreviate(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("\n  ")
		for l != "" {
			n := 1
			for n < len(l) && l[n] == l[0] {
				n++
			}
			if n > 8 {
				fmt.Fprintf(&b, "%c×%d", l[0], n)
			} else {
				b.WriteString(l[:n])
			}
			l = l[n:]
		}
	}
	return b.String()
}

// FuzzOutputLines: whatever the output and the write boundaries, the lines
// are the same, none holds a line break, none is longer than the cap (twice
// it after redaction, masks being longer than the shortest values) and its
// mark, and no secret value shows.
func FuzzOutputLines(f *testing.F) {
	const secret = "s3cr3t-value"
	f.Add("plain\n", uint16(1), uint8(3))
	f.Add("x", uint16(65535), uint8(200))
	f.Add("progress 10%\r", uint16(9000), uint8(17))
	f.Add("abc"+secret, uint16(20000), uint8(255))
	f.Add("\r\n"+secret+"\r", uint16(30000), uint8(1))
	f.Fuzz(func(t *testing.T, unit string, repeat uint16, chunk uint8) {
		if len(unit)*int(repeat) > 1<<20 {
			return
		}
		in := strings.Repeat(unit, int(repeat))
		red := newRedactor()
		red.add(secret)
		whole := lines(t, red, in, len(in)+1)
		if chunked := lines(t, red, in, int(chunk)+1); !slices.Equal(whole, chunked) {
			t.Fatalf("written in chunks of %d: %s\nwhole: %s", int(chunk)+1, abbreviate(chunked), abbreviate(whole))
		}
		for _, l := range whole {
			if strings.ContainsAny(l, "\r\n") || len(l) > 2*maxLineBytes+len(cutMark) || strings.Contains(l, secret) {
				t.Fatalf("line %s", abbreviate([]string{l}))
			}
		}
	})
}

// lines are the lines the event writer emits for in, written size bytes at a
// time.
func lines(t *testing.T, red *redactor, in string, size int) []string {
	t.Helper()
	r := &run{notify: make(chan struct{}), done: make(chan struct{})}
	w := newEventWriter(r, logr.Discard(), red)
	for in != "" {
		n := min(size, len(in))
		if _, err := w.Write([]byte(in[:n])); err != nil {
			t.Fatal(err)
		}
		in = in[n:]
	}
	w.Flush()
	var out []string
	for _, ev := range r.events {
		out = append(out, ev.GetLog())
	}
	return out
}
