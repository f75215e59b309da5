package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
)

// maxCapturedOutput bounds what the agent keeps of each output stream of a
// pulumi command whose output it streams: the first and last halves of its
// lines, each cut at maxLineBytes.
const maxCapturedOutput = 2 << 20

// pulumiCLI runs the pulumi CLI for the Automation API, keeping in memory a
// bounded part of the output of the commands whose output the agent streams.
//
// The Automation API's own runner keeps the whole stdout and stderr of every
// command, besides streaming them, to return them and quote them in its
// errors: a program printing 200 MB during an update, or a `pulumi install`
// printing a progress bar for as long, costs the agent that much memory and
// more while the buffers double (680 MiB for 200 MiB without a newline,
// TestInstallPrintingAHugeLine). For those commands (an operation's
// progress, install) the Automation API reads the captured output only for
// its error message (the engine's error lines), a permalink (printed first)
// and a lock conflict (on stderr): pulumiCLI keeps of each stream its lines
// cut as the agent's output writers cut them, the first and last
// maxCapturedOutput/2 bytes of them, with a mark where it left lines out.
// The other commands (stack output --json, config, whoami) print data the
// Automation API parses, and run as it runs them.
type pulumiCLI struct {
	// PulumiCommand is the Automation API's runner: the version, and the
	// commands without streams.
	auto.PulumiCommand
	// path is the CLI's binary, as the Automation API finds it.
	path string
	// redact knows the secret values a line cut must not split.
	redact *redactor
}

// newPulumiCLI finds the CLI as auto.NewPulumiCommand does: root/bin/pulumi,
// or pulumi on PATH when root is empty.
func newPulumiCLI(root string, red *redactor) (*pulumiCLI, error) {
	cmd, err := auto.NewPulumiCommand(&auto.PulumiCommandOptions{Root: root})
	if err != nil {
		return nil, err
	}
	path := "pulumi"
	if root != "" {
		path = filepath.Join(root, "bin", "pulumi")
	}
	return &pulumiCLI{PulumiCommand: cmd, path: path, redact: red}, nil
}

// Run runs a command as the Automation API's runner does (auto/cmd.go,
// pulumiCommand.Run: non-interactive, the CLI's directory first on PATH, an
// interrupt on cancellation then a kill 10 s later), capturing a bounded part
// of the output when the caller streams it.
func (c *pulumiCLI) Run(ctx context.Context, workdir string, stdin io.Reader, additionalOutput, additionalErrorOutput []io.Writer,
	additionalEnv []string, args ...string) (string, string, int, error) {
	if len(additionalOutput) == 0 && len(additionalErrorOutput) == 0 {
		return c.PulumiCommand.Run(ctx, workdir, stdin, additionalOutput, additionalErrorOutput, additionalEnv, args...)
	}
	cmd := exec.CommandContext(ctx, c.path, nonInteractive(args)...)
	cmd.Dir = workdir
	env := append(append(os.Environ(), additionalEnv...), "PULUMI_AUTOMATION_API=true")
	if filepath.IsAbs(c.path) {
		env = pathFirst(env, filepath.Dir(c.path))
	}
	cmd.Env = env
	stdout, stderr := newCapture(c.redact), newCapture(c.redact)
	cmd.Stdout = io.MultiWriter(append(slices.Clone(additionalOutput), stdout)...)
	cmd.Stderr = io.MultiWriter(append(slices.Clone(additionalErrorOutput), stderr)...)
	cmd.Stdin = stdin
	cmd.Cancel = func() error {
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			_ = cmd.Process.Kill()
		}
		return nil
	}
	cmd.WaitDelay = 10 * time.Second
	code := -2 // the Automation API's unknown exit code
	err := cmd.Run()
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err == nil {
		code = 0
	}
	return stdout.String(), stderr.String(), code, err
}

// nonInteractive adds --non-interactive before a "--", as the Automation API
// does: a command fails rather than waits for input.
func nonInteractive(args []string) []string {
	own := args
	if i := slices.Index(args, "--"); i >= 0 {
		own = args[:i]
	}
	if slices.Contains(own, "--non-interactive") {
		return args
	}
	return append([]string{"--non-interactive"}, args...)
}

// pathFirst puts dir first on env's PATH (the CLI finds its bundled
// plugins there).
func pathFirst(env []string, dir string) []string {
	out := slices.Clone(env)
	for i, e := range out {
		if len(e) >= 5 && strings.EqualFold(e[:5], "PATH=") {
			if old := e[5:]; old != "" {
				dir += string(os.PathListSeparator) + old
			}
			out[i] = "PATH=" + dir
			return out
		}
	}
	return append(out, "PATH="+dir)
}

// capture keeps a bounded part of one output stream of a command: its lines,
// split and cut as the agent's output writers do but not redacted (the
// Automation API quotes them in its errors, which the agent redacts whole),
// the first and last maxCapturedOutput/2 bytes of them.
type capture struct {
	lines *lineWriter
	kept  headTail
}

func newCapture(red *redactor) *capture {
	c := &capture{kept: headTail{half: maxCapturedOutput / 2}}
	c.lines = &lineWriter{text: capturedLine(red), keepBlank: true, emit: func(l string) {
		_, _ = c.kept.Write([]byte(l + "\n"))
	}}
	return c
}

// capturedLine is a line as the agent captures the CLI's output: when over
// maxLineBytes, cut (before a secret value the cut would split: see
// redactor.cutIndex) and marked with lineCutMark, whose ellipsis has the
// redaction mask the start of a longer one.
func capturedLine(red *redactor) func(string) string {
	return func(l string) string {
		if len(l) > maxLineBytes {
			return l[:red.cutIndex(l, maxLineBytes)] + lineCutMark
		}
		return l
	}
}

func (c *capture) Write(p []byte) (int, error) { return c.lines.Write(p) }

// String is what was kept; the command has ended.
func (c *capture) String() string {
	c.lines.Flush()
	return c.kept.String()
}

// headTail keeps the first half bytes written to it and the last half (at
// most 2*half in memory). It is written from one goroutine (exec copies each
// stream in its own) and read once the command has ended.
type headTail struct {
	half  int
	head  []byte
	tail  []byte
	total int64
}

func (h *headTail) Write(p []byte) (int, error) {
	n := len(p)
	h.total += int64(n)
	if room := h.half - len(h.head); room > 0 {
		take := min(room, len(p))
		h.head = append(h.head, p[:take]...)
		p = p[take:]
	}
	switch {
	case len(p) >= h.half:
		h.tail = append(h.tail[:0], p[len(p)-h.half:]...)
	case len(h.tail)+len(p) > 2*h.half:
		keep := h.tail[len(h.tail)-(h.half-len(p)):]
		h.tail = append(append(h.tail[:0], keep...), p...)
	default:
		h.tail = append(h.tail, p...)
	}
	return n, nil
}

// String is all that was written, or, when more was written than kept, the
// whole lines of the head and of the last half, a mark between them: a line
// cut at either end could hold part of a secret that redaction, which masks
// whole values, would miss.
func (h *headTail) String() string {
	if h.total == int64(len(h.head)+len(h.tail)) {
		return string(h.head) + string(h.tail)
	}
	kept := h.tail[len(h.tail)-min(len(h.tail), h.half):]
	head := h.head[:bytes.LastIndexByte(h.head, '\n')+1]
	tail := kept[bytes.IndexByte(kept, '\n')+1:]
	if bytes.IndexByte(kept, '\n') < 0 {
		tail = nil
	}
	return fmt.Sprintf("%s[%d bytes of output not kept by the agent]\n%s", head, h.total-int64(len(head)+len(tail)), tail)
}
