// Package workflow holds the Actions runner's file and stdout commands the
// action uses: outputs in the heredoc format ($GITHUB_OUTPUT), the job
// summary ($GITHUB_STEP_SUMMARY), ::warning::, ::error:: and ::add-mask::,
// and plain log lines. It is the one place the action writes to the
// workflow log, and it escapes every message so that no text from a pull
// request can start a workflow command.
//
// It imports the standard library only.
package workflow

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
)

// SetOutputs appends outputs to the $GITHUB_OUTPUT file in the runner's
// heredoc format (name<<DELIMITER, value, DELIMITER), with a random
// delimiter no value contains. An empty path does nothing.
func SetOutputs(path string, outputs [][2]string) error {
	if path == "" {
		return nil
	}
	var b strings.Builder
	for _, kv := range outputs {
		delim := delimiter(kv[1])
		fmt.Fprintf(&b, "%s<<%s\n%s\n%s\n", kv[0], delim, kv[1], delim)
	}
	return appendFile(path, b.String())
}

// WriteSummary appends Markdown to the $GITHUB_STEP_SUMMARY file.
func WriteSummary(path, markdown string) error {
	if path == "" {
		return nil
	}
	return appendFile(path, markdown)
}

func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func delimiter(value string) string {
	for {
		var b [12]byte
		_, _ = rand.Read(b[:])
		d := "ghadelimiter_" + hex.EncodeToString(b[:])
		if !strings.Contains(value, d) {
			return d
		}
	}
}

// Every line the action writes to the workflow log goes through this file:
// Info, Warning, Error and Mask. The runner reads each line of a step's
// output as a possible workflow command ("::name::…", and the older
// "##[name]…") after trimming its leading white space, and text from a pull
// request (a Stack's metadata.name, a project's name, an error quoting a
// manifest) could otherwise start one: a newline followed by "::error::…"
// forges an annotation, "::stop-commands::…" switches command processing off
// for the rest of the step (so ::add-mask:: would no longer mask anything),
// "::add-mask::…" hides chosen words from the log. So every message is
// escaped as the runner expects (%, CR and LF), which keeps it on its line,
// and a line of its own (Info) that would still start a command has its
// first character escaped too. (The action writes no command properties,
// file= or title=, whose values would also need ":" and "," escaped.)

// escapeData escapes a command's message as the runner expects: a message
// holding "%", CR or LF can then never end its line.
func escapeData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

// inert escapes a plain log line (escapeData) and, when what is left would
// still start a workflow command once the runner trims its leading white
// space ("::" or "##["), its first character: "%3A:…", "%23#[…".
func inert(s string) string {
	s = escapeData(s)
	t := strings.TrimLeftFunc(s, unicode.IsSpace)
	switch {
	case strings.HasPrefix(t, "::"):
		return s[:len(s)-len(t)] + "%3A" + t[1:]
	case strings.HasPrefix(t, "##["):
		return s[:len(s)-len(t)] + "%23" + t[1:]
	}
	return s
}

// Info prints a plain line: it can never be read as a workflow command.
func Info(w io.Writer, msg string) { fmt.Fprintf(w, "%s\n", inert(msg)) }

// Warning prints a ::warning:: annotation.
func Warning(w io.Writer, msg string) { fmt.Fprintf(w, "::warning::%s\n", escapeData(msg)) }

// Error prints an ::error:: annotation.
func Error(w io.Writer, msg string) { fmt.Fprintf(w, "::error::%s\n", escapeData(msg)) }

// Mask asks the runner to mask a value in the log from now on; each line
// of a multi-line value is masked.
func Mask(w io.Writer, value string) {
	for _, line := range strings.Split(value, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			fmt.Fprintf(w, "::add-mask::%s\n", escapeData(line))
		}
	}
}
