package inputs

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Input is one action input: its name (as in action.yml), default and
// description (the README's and action.yml's text).
type Input struct {
	Name        string
	Default     string
	Description string
}

// All are the action's inputs, in the order action.yml lists them.
var All = []Input{
	{"mode", "program", "`program`: preview the stacks of the Pulumi project in `work-dir`; `manifests`: preview the Stacks whose manifests the pull request changes"},
	{"work-dir", ".", "program mode: the directory of the Pulumi project (Pulumi.yaml), relative to the workspace"},
	{"stacks", "", "program mode: the stacks to preview, separated by newlines or commas (required in program mode)"},
	{"manifests-dir", ".", "manifests mode: the directory holding the Stack manifests (searched recursively), relative to the workspace"},
	{"github-token", "${{ github.token }}", "token for the PR comment and commit statuses (needs `pull-requests: write` and `statuses: write`)"},
	{"comment", "always", "`always`: write the PR comment; `on-change`: only when a stack changes (an earlier comment is then updated to say nothing changes; none is created); `never`"},
	{"status-checks", "true", "set a commit status per stack on the PR head, usable as a required check: `stackflow/preview/<project>/<stack>`, the project named as the base branch names it (manifests mode: `stackflow/preview/<namespace>/<name>`)"},
	{"parallel", "4", "how many previews run at once"},
	{"refresh", "false", "refresh the stacks' state before previewing"},
	{"git-token", "", "manifests mode: token for cloning private program repositories over HTTPS (default: `github-token`); sent only to the hosts of `git-token-hosts`"},
	{"git-token-hosts", "", "manifests mode: the hosts (`host` or `host:port`, separated by newlines or commas) that receive `git-token` when a Stack's `projectRepo` is there (default: the host of `GITHUB_SERVER_URL`); repositories elsewhere are cloned without it"},
	{"backends", "", "the state backend URLs a pull request may name, separated by newlines or commas: in manifests mode a Stack's `spec.backend` (or a `PULUMI_BACKEND_URL` variable), in program mode Pulumi.yaml's `backend.url` when the job gives `PULUMI_ACCESS_TOKEN`; a stack naming another one is not previewed (the CLI would send it your Pulumi credentials). The backend of the job's environment is always allowed"},
	{"git-timeout", "5m", "how long each git operation may take (cloning a Stack's program repository, fetching the pull request's base commit), as a Go duration (`90s`, `5m`); a git server that does not answer in time fails that Stack (or, for the base commit, the job) with a message saying so"},
	{"preview-timeout", "30m", "how long each stack's preview may take, as a Go duration (`30m`, `1h`); a preview still running then is stopped and its stack fails with a message saying so, while the other stacks' previews go on"},
	{"not-previewed", "failure", "manifests mode: the commit status of a Stack that is not previewed (removed from the manifests, a `fluxSource`, a `programRef` not in the tree, no program source): `failure` (the job fails too) or `success`"},
}

// Mode is what the action previews.
type Mode string

const (
	ModeProgram   Mode = "program"
	ModeManifests Mode = "manifests"
)

// CommentMode says when the PR comment is written.
type CommentMode string

const (
	CommentAlways   CommentMode = "always"
	CommentOnChange CommentMode = "on-change"
	CommentNever    CommentMode = "never"
)

// Config is the action's configuration.
type Config struct {
	Mode         Mode
	WorkDir      string
	Stacks       []string
	ManifestsDir string
	GitHubToken  string
	Comment      CommentMode
	StatusChecks bool
	Parallel     int
	Refresh      bool
	GitToken     string
	// GitTokenHosts are the hosts ("host" or "host:port", lower case)
	// that receive GitToken.
	GitTokenHosts []string
	// Backends are the state backend URLs a Stack manifest may name.
	Backends []string
	// NotPreviewed is the commit status state of a Stack that is not
	// previewed: "failure" or "success".
	NotPreviewed string
	// GitTimeout bounds each git operation: a clone, a fetch.
	GitTimeout time.Duration
	// PreviewTimeout bounds each stack's preview.
	PreviewTimeout time.Duration

	// The runner's variables.
	Repository string // owner/name
	APIURL     string // GITHUB_API_URL (GitHub Enterprise Server: https://HOST/api/v3)
	ServerURL  string // GITHUB_SERVER_URL
	RunID      string
	// Workflow identifies the workflow that runs the job: the path of its
	// file (GITHUB_WORKFLOW_REF without "@<ref>"), else its name
	// (GITHUB_WORKFLOW).
	Workflow        string
	Workspace       string
	StepSummaryFile string
	OutputFile      string

	// From the event (GITHUB_EVENT_PATH).
	PR      int
	HeadSHA string // the PR head (never GITHUB_SHA, the merge commit)
	BaseSHA string
	// EventName is GITHUB_EVENT_NAME; HeadRepo and BaseRepo are the
	// pull request's head and base repositories (owner/name; HeadRepo is
	// empty when the fork was deleted).
	EventName          string
	HeadRepo, BaseRepo string
}

// FromFork reports whether the pull request comes from another repository
// (a fork), or from one that no longer exists.
func (c Config) FromFork() bool {
	return c.HeadRepo == "" || !strings.EqualFold(c.HeadRepo, c.BaseRepo)
}

// RunURL is the link to this run's page.
func (c Config) RunURL() string {
	if c.ServerURL == "" || c.Repository == "" || c.RunID == "" {
		return ""
	}
	return strings.TrimSuffix(c.ServerURL, "/") + "/" + c.Repository + "/actions/runs/" + c.RunID
}

// EnvName is the variable the runner sets for an input: INPUT_ and the name
// in upper case (dashes kept, as the runner does).
func EnvName(input string) string {
	return "INPUT_" + strings.ToUpper(strings.ReplaceAll(input, " ", "_"))
}

// Load reads the configuration from the environment (getenv: os.Getenv in
// production).
func Load(getenv func(string) string) (Config, error) {
	in := func(name string) string {
		v := strings.TrimSpace(getenv(EnvName(name)))
		if v == "" {
			for _, i := range All {
				if i.Name == name && !strings.HasPrefix(i.Default, "${{") {
					return i.Default
				}
			}
		}
		return v
	}
	var errs []error
	c := Config{
		Mode: Mode(in("mode")), WorkDir: in("work-dir"), ManifestsDir: in("manifests-dir"),
		GitHubToken: in("github-token"), Comment: CommentMode(in("comment")), GitToken: in("git-token"),
		Repository: getenv("GITHUB_REPOSITORY"), APIURL: getenv("GITHUB_API_URL"), ServerURL: getenv("GITHUB_SERVER_URL"),
		RunID: getenv("GITHUB_RUN_ID"), Workspace: getenv("GITHUB_WORKSPACE"),
		StepSummaryFile: getenv("GITHUB_STEP_SUMMARY"), OutputFile: getenv("GITHUB_OUTPUT"),
		EventName: getenv("GITHUB_EVENT_NAME"), NotPreviewed: in("not-previewed"),
	}
	switch c.Mode {
	case ModeProgram, ModeManifests:
	default:
		errs = append(errs, fmt.Errorf("input mode: %q is not program or manifests", c.Mode))
	}
	switch c.Comment {
	case CommentAlways, CommentOnChange, CommentNever:
	default:
		errs = append(errs, fmt.Errorf("input comment: %q is not always, on-change or never", c.Comment))
	}
	c.Stacks = list(in("stacks"))
	c.Backends = list(in("backends"))
	switch c.NotPreviewed {
	case "failure", "success":
	default:
		errs = append(errs, fmt.Errorf("input not-previewed: %q is not failure or success", c.NotPreviewed))
	}
	if c.Mode == ModeProgram && len(c.Stacks) == 0 {
		errs = append(errs, errors.New("input stacks: program mode needs the stacks to preview (newline- or comma-separated)"))
	}
	var err error
	if c.StatusChecks, err = strconv.ParseBool(in("status-checks")); err != nil {
		errs = append(errs, fmt.Errorf("input status-checks: %q is not true or false", in("status-checks")))
	}
	if c.Refresh, err = strconv.ParseBool(in("refresh")); err != nil {
		errs = append(errs, fmt.Errorf("input refresh: %q is not true or false", in("refresh")))
	}
	if c.Parallel, err = strconv.Atoi(in("parallel")); err != nil || c.Parallel < 1 || c.Parallel > 64 {
		errs = append(errs, fmt.Errorf("input parallel: %q is not a number from 1 to 64", in("parallel")))
	}
	c.GitTimeout = duration(in, "git-timeout", &errs)
	c.PreviewTimeout = duration(in, "preview-timeout", &errs)
	c.Workflow, _, _ = strings.Cut(getenv("GITHUB_WORKFLOW_REF"), "@")
	if c.Workflow == "" {
		c.Workflow = getenv("GITHUB_WORKFLOW")
	}
	if c.GitToken == "" {
		c.GitToken = c.GitHubToken
	}
	if c.APIURL == "" {
		c.APIURL = "https://api.github.com"
	}
	if c.ServerURL == "" {
		c.ServerURL = "https://github.com"
	}
	hosts := in("git-token-hosts")
	if hosts == "" {
		u, err := url.Parse(c.ServerURL)
		if err != nil || u.Host == "" {
			errs = append(errs, fmt.Errorf("GITHUB_SERVER_URL %q is not a URL, so git-token-hosts has no default: set it", c.ServerURL))
		} else {
			hosts = u.Host
		}
	}
	for _, h := range list(hosts) {
		if strings.Contains(h, "/") || strings.Contains(h, "@") {
			errs = append(errs, fmt.Errorf("input git-token-hosts: %q is not a host or host:port", h))
			continue
		}
		c.GitTokenHosts = append(c.GitTokenHosts, strings.ToLower(h))
	}
	if c.Workspace == "" {
		if c.Workspace, err = os.Getwd(); err != nil {
			errs = append(errs, err)
		}
	}
	if path := getenv("GITHUB_EVENT_PATH"); path != "" {
		if err := c.readEvent(path); err != nil {
			errs = append(errs, err)
		}
	}
	if c.PR == 0 {
		errs = append(errs, errors.New("no pull request: run the action on pull_request events (GITHUB_EVENT_PATH has no pull_request)"))
	}
	if c.PR != 0 && c.EventName == "pull_request_target" && c.FromFork() {
		// pull_request_target runs with the base repository's secrets and
		// a write token; the previews would run code a fork chose.
		errs = append(errs, fmt.Errorf("refusing to preview a pull request from a fork (%s) on pull_request_target: the previews would run the fork's code with this repository's secrets; run the action on pull_request (see github-action/README.md)", orUnknown(c.HeadRepo)))
	}
	return c, errors.Join(errs...)
}

// maxTimeout is GitHub's own limit on a job (6 hours).
const maxTimeout = 6 * time.Hour

// duration reads a timeout input: a Go duration from 1s to 6h.
func duration(in func(string) string, name string, errs *[]error) time.Duration {
	d, err := time.ParseDuration(in(name))
	if err != nil || d < time.Second || d > maxTimeout {
		*errs = append(*errs, fmt.Errorf("input %s: %q is not a duration from 1s to 6h (such as 90s, 5m or 1h)", name, in(name)))
		return 0
	}
	return d
}

// list splits an input's value at newlines and commas, trimming each item
// and dropping empty ones.
func list(v string) []string {
	var out []string
	for _, s := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "a deleted repository"
	}
	return s
}

// readEvent reads the PR number and its head and base SHAs from the event.
func (c *Config) readEvent(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read the event (GITHUB_EVENT_PATH): %w", err)
	}
	var ev struct {
		Number      int `json:"number"`
		PullRequest *struct {
			Number int `json:"number"`
			Head   ref `json:"head"`
			Base   ref `json:"base"`
		} `json:"pull_request"`
	}
	if err := json.Unmarshal(b, &ev); err != nil {
		return fmt.Errorf("read the event (GITHUB_EVENT_PATH): %w", err)
	}
	if pr := ev.PullRequest; pr != nil {
		c.PR, c.HeadSHA, c.BaseSHA = pr.Number, pr.Head.SHA, pr.Base.SHA
		if pr.Head.Repo != nil {
			c.HeadRepo = pr.Head.Repo.FullName
		}
		if pr.Base.Repo != nil {
			c.BaseRepo = pr.Base.Repo.FullName
		}
	}
	return nil
}

// ref is a pull request's head or base in the event.
type ref struct {
	SHA  string `json:"sha"`
	Repo *struct {
		FullName string `json:"full_name"`
	} `json:"repo"`
}
