package inputs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
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
	{"status-checks", "true", "set a commit status `stackflow/preview/<stack>` per stack on the PR head, usable as a required check"},
	{"parallel", "4", "how many previews run at once"},
	{"refresh", "false", "refresh the stacks' state before previewing"},
	{"git-token", "", "manifests mode: token for cloning private program repositories over HTTPS (default: `github-token`)"},
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

	// The runner's variables.
	Repository      string // owner/name
	APIURL          string // GITHUB_API_URL (GitHub Enterprise Server: https://HOST/api/v3)
	ServerURL       string // GITHUB_SERVER_URL
	RunID           string
	Workspace       string
	StepSummaryFile string
	OutputFile      string

	// From the event (GITHUB_EVENT_PATH).
	PR      int
	HeadSHA string // the PR head (never GITHUB_SHA, the merge commit)
	BaseSHA string
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
	for _, s := range strings.FieldsFunc(in("stacks"), func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		if s = strings.TrimSpace(s); s != "" {
			c.Stacks = append(c.Stacks, s)
		}
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
	if c.GitToken == "" {
		c.GitToken = c.GitHubToken
	}
	if c.APIURL == "" {
		c.APIURL = "https://api.github.com"
	}
	if c.ServerURL == "" {
		c.ServerURL = "https://github.com"
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
		errs = append(errs, errors.New("no pull request: run the action on pull_request (or pull_request_target) events (GITHUB_EVENT_PATH has no pull_request)"))
	}
	return c, errors.Join(errs...)
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
			Head   struct {
				SHA string `json:"sha"`
			} `json:"head"`
			Base struct {
				SHA string `json:"sha"`
			} `json:"base"`
		} `json:"pull_request"`
	}
	if err := json.Unmarshal(b, &ev); err != nil {
		return fmt.Errorf("read the event (GITHUB_EVENT_PATH): %w", err)
	}
	if ev.PullRequest != nil {
		c.PR, c.HeadSHA, c.BaseSHA = ev.PullRequest.Number, ev.PullRequest.Head.SHA, ev.PullRequest.Base.SHA
	}
	return nil
}
