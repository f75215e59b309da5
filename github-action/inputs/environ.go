package inputs

import (
	"os"
	"strings"
)

// ChildEnviron is environ (KEY=VALUE pairs) without what no child process
// may see: every INPUT_* variable (the runner passes the action's inputs,
// github-token and git-token among them, that way) and every variable
// whose value is one of tokens (a workflow that also exported
// GITHUB_TOKEN to the step). A previewed program is code a pull request
// chose; it must not be able to read the action's tokens.
func ChildEnviron(environ []string, tokens ...string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		if !secretVar(kv, tokens) {
			out = append(out, kv)
		}
	}
	return out
}

// ScrubEnvironment removes from this process's environment what
// ChildEnviron drops, once the configuration has been read. The pulumi
// Automation API starts every CLI process with the process's own
// environment (os.Environ), and the CLI passes it on to language hosts,
// plugins and the program: unsetting is the only way to keep the tokens
// from them.
func ScrubEnvironment(tokens ...string) error {
	for _, kv := range os.Environ() {
		if secretVar(kv, tokens) {
			name, _, _ := strings.Cut(kv, "=")
			if err := os.Unsetenv(name); err != nil {
				return err
			}
		}
	}
	return nil
}

func secretVar(kv string, tokens []string) bool {
	name, value, _ := strings.Cut(kv, "=")
	if strings.HasPrefix(strings.ToUpper(name), "INPUT_") {
		return true
	}
	for _, t := range tokens {
		if t != "" && value == t {
			return true
		}
	}
	return false
}
