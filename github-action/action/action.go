// Package action runs the GitHub Action: it removes the inputs and tokens
// from the environment every child process inherits, turns the
// configuration into preview requests (program mode: the listed stacks;
// manifests mode: the Stacks the pull request changes, each checked
// against what a pull request may ask), sets a pending commit status per
// stack on the PR head, previews, then writes the final statuses (not
// previewed is failure unless the workflow says otherwise), the job
// summary, the one PR comment (this job's sections; in manifests mode, the
// only sections of its scope) and the step outputs.
//
// It imports the action's parts: inputs, preview, manifests, report,
// githubapi and workflow.
package action

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"sigs.k8s.io/yaml"

	"github.com/stackflow-io/stackflow/github-action/githubapi"
	"github.com/stackflow-io/stackflow/github-action/inputs"
	"github.com/stackflow-io/stackflow/github-action/manifests"
	"github.com/stackflow-io/stackflow/github-action/preview"
	"github.com/stackflow-io/stackflow/github-action/report"
	"github.com/stackflow-io/stackflow/github-action/result"
	"github.com/stackflow-io/stackflow/github-action/workflow"
)

// StatusContextPrefix prefixes each stack's commit status context.
const StatusContextPrefix = "stackflow/preview/"

// maxContext is the longest status context GitHub accepts (it answers 422
// "Validation Failed" beyond 255 characters).
const maxContext = 255

// StatusContext is a stack's commit status context: the prefix and its
// result key, "<project>/<stack>" (program mode) or "<namespace>/<name>"
// (manifests mode), so two projects' "dev" stacks never share one. A
// context over GitHub's limit is cut and ends with a digest of the whole
// key, so two long keys still differ.
func StatusContext(key string) string {
	c := StatusContextPrefix + key
	if r := []rune(c); len(r) > maxContext {
		sum := sha256.Sum256([]byte(key))
		suffix := "…" + hex.EncodeToString(sum[:6])
		c = string(r[:maxContext-len([]rune(suffix))]) + suffix
	}
	return c
}

// Deps are what tests replace.
type Deps struct {
	// PulumiCommand is the pulumi CLI (default: found on PATH).
	PulumiCommand auto.PulumiCommand
	// Env is added to the pulumi processes' environment (the process's
	// own environment is inherited).
	Env map[string]string
	// GitHub configures the GitHub client (Token and APIURL come from the
	// configuration).
	GitHub githubapi.Options
	// Now is the clock.
	Now func() time.Time
	// AllowLoopbackHTTP lets manifests name program repositories on
	// http:// loopback addresses, where the tests' git servers are. No
	// input sets it.
	AllowLoopbackHTTP bool
}

// Run runs the action and returns the process's exit code: 1 when a preview
// failed, a Stack was refused or (with not-previewed: failure) not
// previewed, or the action could not run; 0 otherwise. GitHub refusing a
// comment or status (a fork's read-only token) is a warning, not a failure.
func Run(ctx context.Context, c inputs.Config, d Deps, log io.Writer) int {
	if d.Now == nil {
		d.Now = time.Now
	}
	workflow.Mask(log, c.GitHubToken)
	if c.GitToken != c.GitHubToken {
		workflow.Mask(log, c.GitToken)
	}
	// Every child process (git, the pulumi CLI, the program previewed)
	// starts without the inputs and the tokens.
	if err := inputs.ScrubEnvironment(c.GitHubToken, c.GitToken); err != nil {
		workflow.Error(log, "remove the tokens from the environment: "+err.Error())
		return 1
	}
	reqs, contexts, cleanup, err := requests(ctx, c, d)
	defer cleanup()
	if err != nil {
		workflow.Error(log, err.Error())
		return 1
	}
	var gh *githubapi.Client
	if c.GitHubToken != "" && (c.StatusChecks || c.Comment != inputs.CommentNever) {
		o := d.GitHub
		o.Token, o.APIURL = c.GitHubToken, c.APIURL
		if gh, err = githubapi.New(o); err != nil {
			workflow.Error(log, err.Error())
			return 1
		}
	}
	readOnly := false
	github := func(op string, err error) {
		var ro *githubapi.ReadOnlyError
		switch {
		case err == nil:
		case errors.As(err, &ro):
			if !readOnly {
				workflow.Warning(log, fmt.Sprintf("GitHub refused to %s (HTTP %d: %s): the token is read-only, as for a pull request from a fork; the job summary has the previews", ro.Op, ro.StatusCode, ro.Message))
			}
			readOnly = true
		default:
			workflow.Warning(log, fmt.Sprintf("%s: %v", op, err))
		}
	}
	setStatus := func(ctxName, state, desc string) {
		if gh == nil || !c.StatusChecks || readOnly || c.HeadSHA == "" {
			return
		}
		github("set the commit status "+ctxName, gh.SetStatus(ctx, c.Repository, c.HeadSHA, ctxName, state, desc, c.RunURL()))
	}
	for _, name := range contexts {
		setStatus(name, "pending", "previewing")
	}

	fmt.Fprintf(log, "Previewing %d stack(s), %d at a time\n", len(reqs), c.Parallel)
	results := preview.Options{PulumiCommand: d.PulumiCommand, Env: d.Env, Mask: func(s string) { workflow.Mask(log, s) }}.Run(ctx, withRefresh(reqs, c.Refresh), c.Parallel)

	failed := 0
	for i, r := range results {
		state, desc := report.Status(r, c.NotPreviewed)
		setStatus(contexts[i], state, desc)
		switch {
		case r.Status == result.Failed:
			failed++
			workflow.Error(log, fmt.Sprintf("preview of %s failed: %s", r.Key, r.Error))
		case r.Status == result.Skipped && state == "failure":
			failed++
			workflow.Error(log, fmt.Sprintf("%s was not previewed: %s", r.Key, strings.Join(r.Notes, " ")))
		}
		fmt.Fprintf(log, "%s: %s (+%d ~%d -%d ±%d)\n", r.Key, r.Status, r.Changes.Create, r.Changes.Update, r.Changes.Delete, r.Changes.Replace)
	}
	if err := workflow.WriteSummary(c.StepSummaryFile, report.Summary(results, report.SummaryOptions{RunURL: c.RunURL()})); err != nil {
		workflow.Warning(log, "write the job summary: "+err.Error())
	}

	commentURL := ""
	write := writeComment(c.Comment, results)
	if gh != nil && !readOnly && !write && c.Comment == inputs.CommentOnChange {
		// Nothing changes now: an earlier comment (that showed changes)
		// is updated to say so; none is created.
		has, err := gh.HasComment(ctx, c.Repository, c.PR)
		github("read the PR comments", err)
		write = has
	}
	if gh != nil && !readOnly && write {
		// Manifests mode previews every Stack the pull request changes in
		// this one job: its scope's sections of Stacks no longer changed
		// are removed (and a pull request that changes none gets a comment
		// saying nothing changes).
		scope := ""
		if c.Mode == inputs.ModeManifests {
			scope = "manifests:" + path.Clean("/"+filepath.ToSlash(c.ManifestsDir))
		}
		var sections []string
		for _, r := range results {
			sections = append(sections, report.Section(r, report.SectionOptions{RunURL: c.RunURL(), Compact: c.Comment == inputs.CommentOnChange, Scope: scope}))
		}
		url, err := gh.UpsertSection(ctx, c.Repository, c.PR, report.CommentOptions{RunURL: c.RunURL(), Now: d.Now(), Scope: scope}, sections...)
		github("write the PR comment", err)
		commentURL = url
	}

	changes, _ := json.Marshal(results)
	if err := workflow.SetOutputs(c.OutputFile, [][2]string{
		{"changes", string(changes)}, {"has-changes", strconv.FormatBool(result.HasChanges(results))}, {"comment-url", commentURL},
	}); err != nil {
		workflow.Warning(log, "write the outputs: "+err.Error())
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// writeComment: always, never, or (on-change) when something would change.
func writeComment(mode inputs.CommentMode, rs []result.Result) bool {
	switch mode {
	case inputs.CommentNever:
		return false
	case inputs.CommentOnChange:
		return result.HasChanges(rs)
	}
	return true
}

func withRefresh(reqs []preview.Request, refresh bool) []preview.Request {
	if refresh {
		for i := range reqs {
			reqs[i].Refresh = true
		}
	}
	return reqs
}

// requests are the previews to run, with each one's commit status context.
func requests(ctx context.Context, c inputs.Config, d Deps) ([]preview.Request, []string, func(), error) {
	noop := func() {}
	switch c.Mode {
	case inputs.ModeManifests:
		if !manifests.IsCommit(c.BaseSHA) || !manifests.IsCommit(c.HeadSHA) {
			return nil, nil, noop, errors.New("manifests mode needs the pull request's base and head commits (run on pull_request events)")
		}
		changes, err := manifests.Changed(c.Workspace, c.ManifestsDir, c.BaseSHA, c.HeadSHA)
		if err != nil {
			return nil, nil, noop, fmt.Errorf("compare the manifests: %w", err)
		}
		head, err := manifests.Load(c.Workspace, c.ManifestsDir, c.HeadSHA)
		if err != nil {
			return nil, nil, noop, fmt.Errorf("read the manifests at the head: %w", err)
		}
		// The job's own backend is always allowed: a Stack naming it
		// sends the credentials nowhere new.
		backends := append([]string(nil), c.Backends...)
		if b := d.Env["PULUMI_BACKEND_URL"]; b != "" {
			backends = append(backends, b)
		} else if b := os.Getenv("PULUMI_BACKEND_URL"); b != "" {
			backends = append(backends, b)
		}
		reqs, cleanup := manifests.PlanAll(ctx, changes, head, manifests.PlanOptions{
			GitToken: c.GitToken, TokenHosts: c.GitTokenHosts, Backends: backends, AllowLoopbackHTTP: d.AllowLoopbackHTTP,
		})
		var contexts []string
		for _, ch := range changes {
			contexts = append(contexts, StatusContext(ch.Key))
		}
		return reqs, contexts, cleanup, nil
	default:
		var reqs []preview.Request
		var contexts []string
		dir := c.WorkDir
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(c.Workspace, dir)
		}
		// The project's name is part of each key (and so of each status
		// context), known before the previews start.
		project, perr := projectName(dir)
		for _, s := range c.Stacks {
			r := preview.Request{WorkDir: dir, Stack: s, Source: "program in " + c.WorkDir, Project: project, Key: stackKey(project, s)}
			if perr != nil {
				r.Err = perr
			}
			reqs = append(reqs, r)
			contexts = append(contexts, StatusContext(r.Key))
		}
		return reqs, contexts, noop, nil
	}
}

// stackKey is "<project>/<stack>"; a fully qualified stack name
// ("org/project/stack") is its own key, as is a stack of an unknown project.
func stackKey(project, stack string) string {
	if project == "" || strings.Count(stack, "/") == 2 {
		return stack
	}
	return project + "/" + stack
}

// projectName reads the project's name from Pulumi.yaml (or Pulumi.yml).
func projectName(dir string) (string, error) {
	var errs []error
	for _, f := range []string{"Pulumi.yaml", "Pulumi.yml"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var p struct {
			Name string `json:"name"`
		}
		if err := yaml.Unmarshal(b, &p); err != nil {
			return "", fmt.Errorf("read %s: %w", f, err)
		}
		if p.Name == "" {
			return "", fmt.Errorf("%s names no project", f)
		}
		return p.Name, nil
	}
	return "", fmt.Errorf("no Pulumi project in %s: %w", dir, errors.Join(errs...))
}
