package action

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stackflow-io/stackflow/github-action/manifests"
	"github.com/stackflow-io/stackflow/internal/redact"
)

// PulumiCloudURL is the Pulumi Cloud's API, the CLI's default backend.
const PulumiCloudURL = "https://api.pulumi.com"

// env is the pulumi processes' environment as the action sees it: Deps.Env
// over the process's own.
type env map[string]string

func (e env) lookup(name string) string {
	if v, ok := e[name]; ok {
		return v
	}
	return os.Getenv(name)
}

// pinBackend decides the backend of a job that gives PULUMI_ACCESS_TOKEN
// without PULUMI_BACKEND_URL. The pulumi CLI would then take the backend
// from the project's Pulumi.yaml (backend.url), which the pull request
// writes, before its stored login, and send the token there. So the action
// sets PULUMI_BACKEND_URL itself: to the stored login's backend if there is
// one (`pulumi login` in an earlier step: PULUMI_HOME's credentials.json),
// else to cloudURL (the Pulumi Cloud). It returns the backend pinned, or
// "" when nothing needs pinning (no token, or the job set the backend).
func pinBackend(e env, cloudURL string) string {
	if e.lookup("PULUMI_ACCESS_TOKEN") == "" || e.lookup("PULUMI_BACKEND_URL") != "" {
		return ""
	}
	if current := storedLogin(e); current != "" {
		return current
	}
	return cloudURL
}

// storedLogin is the backend of the CLI's stored login ("current" in
// PULUMI_HOME/credentials.json, ~/.pulumi by default), or "".
func storedLogin(e env) string {
	home := e.lookup("PULUMI_HOME")
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		home = filepath.Join(h, ".pulumi")
	}
	b, err := os.ReadFile(filepath.Join(home, "credentials.json"))
	if err != nil {
		return ""
	}
	var creds struct {
		Current string `json:"current"`
	}
	if json.Unmarshal(b, &creds) != nil {
		return ""
	}
	return strings.TrimSpace(creds.Current)
}

// checkProjectBackend decides what program mode does with a Pulumi.yaml's
// backend.url (the pull request's) when the job gives a Pulumi access
// token: a backend the workflow allowed (the job's own, pinned or set, or
// one in the backends input) is used; any other is refused, since the CLI
// would send it the token, and previewing against the job's backend
// instead would show a stack that is not the project's.
func checkProjectBackend(url, jobBackend string, allowed []string) (string, error) {
	if url == "" {
		return "", nil
	}
	norm := func(s string) string { return strings.TrimRight(strings.TrimSpace(s), "/") }
	for _, a := range append([]string{jobBackend}, allowed...) {
		if a != "" && norm(a) == norm(url) {
			return url, nil
		}
	}
	return "", fmt.Errorf("Pulumi.yaml's backend.url %s is not in the action's backends input: the pulumi CLI would send the job's Pulumi access token there", manifests.Quote(redact.URLCredentials(url)))
}
