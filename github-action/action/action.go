// Package action runs the GitHub Action: it turns the configuration into
// preview requests (program mode: the listed stacks; manifests mode: the
// Stacks the pull request changes), sets a pending commit status per stack
// on the PR head, previews, then writes the final statuses, the job summary,
// the one PR comment (this job's sections) and the step outputs.
//
// It imports the action's parts: inputs, preview, manifests, report,
// githubapi and workflow.
package action

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

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
}

// Run runs the action and returns the process's exit code: 1 when a preview
// failed (or the action could not run), 0 otherwise. GitHub refusing a
// comment or status (a fork's read-only token) is a warning, not a failure.
func Run(ctx context.Context, c inputs.Config, d Deps, log io.Writer) int {
	if d.Now == nil {
		d.Now = time.Now
	}
	workflow.Mask(log, c.GitHubToken)
	if c.GitToken != c.GitHubToken {
		workflow.Mask(log, c.GitToken)
	}
	reqs, contexts, cleanup, err := requests(ctx, c)
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
		state, desc := report.Status(r)
		setStatus(contexts[i], state, desc)
		if r.Status == result.Failed {
			failed++
			workflow.Error(log, fmt.Sprintf("preview of %s failed: %s", r.Key, r.Error))
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
		var sections []string
		for _, r := range results {
			sections = append(sections, report.Section(r, report.SectionOptions{RunURL: c.RunURL(), Compact: c.Comment == inputs.CommentOnChange}))
		}
		url, err := gh.UpsertSection(ctx, c.Repository, c.PR, report.CommentOptions{RunURL: c.RunURL(), Now: d.Now()}, sections...)
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
func requests(ctx context.Context, c inputs.Config) ([]preview.Request, []string, func(), error) {
	noop := func() {}
	switch c.Mode {
	case inputs.ModeManifests:
		if c.BaseSHA == "" || c.HeadSHA == "" {
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
		reqs, cleanup := manifests.PlanAll(ctx, changes, head, manifests.PlanOptions{GitToken: c.GitToken})
		var contexts []string
		for _, ch := range changes {
			contexts = append(contexts, StatusContextPrefix+ch.Key)
		}
		return reqs, contexts, cleanup, nil
	default:
		var reqs []preview.Request
		var contexts []string
		dir := c.WorkDir
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(c.Workspace, dir)
		}
		for _, s := range c.Stacks {
			reqs = append(reqs, preview.Request{WorkDir: dir, Stack: s, Source: "program in " + c.WorkDir})
			contexts = append(contexts, StatusContextPrefix+s)
		}
		return reqs, contexts, noop, nil
	}
}
