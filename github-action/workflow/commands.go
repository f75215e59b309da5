package workflow

import (
	"strings"
	"unicode"
)

// Command is a workflow command as the Actions runner reads it from a line of
// a step's output.
type Command struct {
	// Name is the command's name ("error", "add-mask", "stop-commands"…).
	Name string
	// Message is what follows the command (its data, still escaped).
	Message string
	// Line is the line it was read from.
	Line string
}

// Commands reads a step's output as the runner does (actions/runner
// ActionCommand.TryParseV2 and TryParse): lines end at LF, CR or CRLF; a
// line whose text, after its leading white space, starts "::name…::" or
// "##[name…]" is a command. The action's tests use it to check that text
// from a pull request never starts one.
func Commands(log string) []Command {
	var out []Command
	for _, line := range strings.FieldsFunc(log, func(r rune) bool { return r == '\n' || r == '\r' }) {
		t := strings.TrimLeftFunc(line, unicode.IsSpace)
		switch {
		case strings.HasPrefix(t, "::"):
			rest := t[2:]
			end := strings.Index(rest, "::")
			if end < 0 {
				continue
			}
			name, _, _ := strings.Cut(rest[:end], " ")
			out = append(out, Command{Name: name, Message: rest[end+2:], Line: line})
		case strings.HasPrefix(t, "##["):
			rest := t[3:]
			end := strings.IndexByte(rest, ']')
			if end < 0 {
				continue
			}
			name, _, _ := strings.Cut(rest[:end], " ")
			out = append(out, Command{Name: name, Message: rest[end+1:], Line: line})
		}
	}
	return out
}
