package agent

import (
	"bytes"
	"strings"
	"sync"

	"github.com/go-logr/logr"

	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

// lineWriter splits a command's output stream into lines and hands each to
// emit, as text makes it: the one line splitter of the agent's output
// writers and of its capture of the CLI's output (command.go).
//
// Its memory is bounded: a line longer than maxLineBytes is cut there (text
// cuts it and marks it with lineCutMark) as soon as lineLookahead more bytes
// have arrived, so that text sees a secret value straddling the cut whole;
// the rest of the line, up to the next line break, is dropped. A program
// printing hundreds of megabytes without a newline costs one buffer of
// maxLineBytes+lineLookahead and time linear in what it prints. A carriage
// return not followed by a newline is a redraw (a progress bar): what follows
// it replaces the line, so only the last redraw is emitted (and a line cut
// before it stays emitted). Lines blank after trimming are dropped unless
// keepBlank.
//
// Each stream needs its own (exec copies stdout and stderr in two goroutines);
// the lock only guards Flush against a late write.
type lineWriter struct {
	// text is the text emitted for a line; one over maxLineBytes must be
	// cut (redactedLine, capturedLine).
	text func(line string) string
	emit func(text string)
	// keepBlank: blank lines are emitted too (the capture keeps the CLI's
	// output as it was, but for cuts).
	keepBlank bool

	mu  sync.Mutex
	buf []byte
	// cut: the current line was cut and emitted; the rest of it is dropped.
	cut bool
	// cr: the last byte was a carriage return; content after it redraws
	// the line, a newline ends it.
	cr bool
}

// redactedLine is a line as the agent reports and logs it: redacted whole,
// cut by redactor.redactCut when it is over maxLineBytes, and valid UTF-8 (a
// program may print any bytes; see capEventText).
func redactedLine(red *redactor) func(string) string {
	return func(l string) string {
		if len(l) > maxLineBytes {
			l = red.redactCut(l, maxLineBytes, lineCutMark)
		} else {
			l = red.redact(l)
		}
		return strings.ToValidUTF8(l, "\uFFFD")
	}
}

// newEventWriter streams a run's engine output as log events of the run and
// lines of the agent's log.
func newEventWriter(r *run, log logr.Logger, red *redactor) *lineWriter {
	return &lineWriter{text: redactedLine(red), emit: func(l string) {
		log.Info(l)
		r.emit(&agentv1.OperationEvent{Event: &agentv1.OperationEvent_Log{Log: l}})
	}}
}

// newLogWriter sends one output stream of a command (pulumi install) to the
// agent's log and records each line in last, so that a command stopped at
// its deadline can say where it was.
func newLogWriter(log logr.Logger, red *redactor, last *lastLine) *lineWriter {
	return &lineWriter{text: redactedLine(red), emit: func(l string) {
		l = strings.TrimSpace(l)
		log.Info(l)
		last.set(l)
	}}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexAny(p, "\r\n")
		if i != 0 {
			text := p
			if i > 0 {
				text = p[:i]
			}
			if w.cr {
				w.startLine() // a redraw
			}
			w.add(text)
			if i < 0 {
				break
			}
			p = p[i:]
		}
		if p[0] == '\n' {
			w.endLine()
		} else {
			w.cr = true
		}
		p = p[1:]
	}
	return n, nil
}

// Flush emits a trailing partial line: what a command killed at its
// deadline was printing.
func (w *lineWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.endLine()
	} else {
		w.startLine()
	}
}

// add appends text to the current line, cutting the line once it holds
// maxLineBytes and the look-ahead.
func (w *lineWriter) add(text []byte) {
	if w.cut {
		return
	}
	room := maxLineBytes + lineLookahead - len(w.buf)
	w.buf = append(w.buf, text[:min(room, len(text))]...)
	if len(w.buf) == maxLineBytes+lineLookahead {
		w.send()
		w.buf, w.cut = w.buf[:0], true
	}
}

// endLine emits the current line (unless it was cut and emitted already)
// and starts the next.
func (w *lineWriter) endLine() {
	if !w.cut {
		w.send()
	}
	w.startLine()
}

func (w *lineWriter) startLine() {
	w.buf, w.cut, w.cr = w.buf[:0], false, false
}

// send emits the buffered line (unless it is blank and blank lines are
// dropped).
func (w *lineWriter) send() {
	if w.keepBlank || len(bytes.TrimSpace(w.buf)) > 0 {
		w.emit(w.text(string(w.buf)))
	}
}

// lastLine is the last non-empty line, redacted, of a command's output
// streams, for a message saying where it stopped.
type lastLine struct {
	mu   sync.Mutex
	line string
}

func (l *lastLine) set(s string) {
	l.mu.Lock()
	l.line = s
	l.mu.Unlock()
}

// String is the line, capped, or "(none)".
func (l *lastLine) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.line == "" {
		return "(none)"
	}
	return truncateMessage(l.line)
}
