// Package workflow holds the Actions runner's file and stdout commands the
// action uses: outputs in the heredoc format ($GITHUB_OUTPUT), the job
// summary ($GITHUB_STEP_SUMMARY), ::warning::, ::error:: and ::add-mask::.
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

// escapeData escapes a command's message as the runner expects.
func escapeData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

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
