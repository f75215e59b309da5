// Package action runs the GitHub Action: it removes the inputs and tokens
// from the environment every child process inherits, pins the backend when
// the job gives a Pulumi access token alone (pinBackend), warns when the
// checkout keeps credentials the program could read, turns the
// configuration into preview requests (program mode: the listed stacks,
// keyed by the project's name on the base commit; manifests mode: the
// Stacks the pull request changes, each checked against what a pull request
// may ask), sets a pending commit status per stack on the PR head,
// previews (each within preview-timeout), then writes the final statuses
// (not previewed is failure unless the workflow says otherwise), the job
// summary, the one PR comment (this job's sections; in manifests mode, the
// only sections of its scope; in program mode, other runs' sections of its
// scope marked outdated) and the step outputs. Everything it prints goes
// through package workflow, which escapes it.
//
// It imports the action's parts: inputs, preview, manifests, gitcli,
// report, githubapi and workflow.
package action

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/stackflow-io/stackflow/github-action/githubapi"
	"github.com/stackflow-io/stackflow/github-action/inputs"
	"github.com/stackflow-io/stackflow/github-action/manifests"
	"github.com/stackflow-io/stackflow/github-action/preview"
	"github.com/stackflow-io/stackflow/github-action/report"
	"github.com/stackflow-io/stackflow/github-action/result"
	"github.com/stackflow-io/stackflow/github-action/workflow"
	"github.com/stackflow-io/stackflow/internal/redact"
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
	// CloudURL is the backend pinned when the job gives
	// PULUMI_ACCESS_TOKEN without PULUMI_BACKEND_URL and no stored login
	// (see pinBackend); default PulumiCloudURL. Tests point it at a
	// listener.
	CloudURL string
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
	// A Pulumi access token without a backend: the backend is pinned, so
	// that no Pulumi.yaml from the pull request can name another.
	if d.CloudURL == "" {
		d.CloudURL = PulumiCloudURL
	}
	pulumiEnv := maps.Clone(d.Env)
	if pulumiEnv == nil {
		pulumiEnv = map[string]string{}
	}
	pinned := pinBackend(pulumiEnv, d.CloudURL)
	if pinned != "" {
		pulumiEnv["PULUMI_BACKEND_URL"] = pinned
		workflow.Info(log, "PULUMI_ACCESS_TOKEN is set without PULUMI_BACKEND_URL: the previews use the backend "+redact.URLCredentials(pinned)+", which a project's Pulumi.yaml (backend.url) cannot change")
	}
	if names := checkoutCredentials(ctx, c.Workspace, c.GitTimeout); len(names) > 0 {
		workflow.Warning(log, "the checkout's git configuration holds credentials ("+strings.Join(names, ", ")+", as actions/checkout stores the workflow's token): the previewed program can read them. Check out with persist-credentials: false (see the action's README)")
	}
	reqs, contexts, cleanup, err := requests(ctx, c, d, pulumiEnv, pinned)
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

	workflow.Info(log, fmt.Sprintf("Previewing %d stack(s), %d at a time, each within %s", len(reqs), c.Parallel, c.PreviewTimeout))
	results := preview.Options{PulumiCommand: d.PulumiCommand, Env: pulumiEnv, Timeout: c.PreviewTimeout,
		Mask: func(s string) { workflow.Mask(log, s) }}.Run(ctx, withRefresh(reqs, c.Refresh), c.Parallel)

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
			workflow.Error(log, fmt.Sprintf("Stack %s was not previewed: %s", r.Key, strings.Join(r.Notes, " ")))
		}
		workflow.Info(log, fmt.Sprintf("Stack %s: %s (+%d ~%d -%d ±%d)", r.Key, r.Status, r.Changes.Create, r.Changes.Update, r.Changes.Delete, r.Changes.Replace))
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
		// saying nothing changes). In program mode the jobs of one run (a
		// matrix) share a scope, each writing its own stacks: a section of
		// the scope that another run wrote and this one does not replace
		// is marked outdated.
		scope, copts := "", report.CommentOptions{RunURL: c.RunURL(), Now: d.Now()}
		if c.Mode == inputs.ModeManifests {
			scope = "manifests:" + path.Clean("/"+filepath.ToSlash(c.ManifestsDir))
			copts.Scope = scope
		} else {
			scope = "program:" + c.Workflow + ":" + path.Clean("/"+filepath.ToSlash(c.WorkDir))
			copts.OutdateScope = scope
		}
		var sections []string
		for _, r := range results {
			sections = append(sections, report.Section(r, report.SectionOptions{RunURL: c.RunURL(), Compact: c.Comment == inputs.CommentOnChange, Scope: scope}))
		}
		url, err := gh.UpsertSection(ctx, c.Repository, c.PR, copts, sections...)
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

// requests are the previews to run, with each one's commit status context;
// pinned is the backend pinBackend chose ("" when the job set its own).
func requests(ctx context.Context, c inputs.Config, d Deps, pulumiEnv env, pinned string) ([]preview.Request, []string, func(), error) {
	noop := func() {}
	origin := manifests.Origin{Timeout: c.GitTimeout, Token: c.GitHubToken}
	if u, err := url.Parse(c.ServerURL); err == nil && u.Host != "" {
		origin.TokenHosts = []string{strings.ToLower(u.Host)}
	}
	var reqs []preview.Request
	cleanup := noop
	switch c.Mode {
	case inputs.ModeManifests:
		if !manifests.IsCommit(c.BaseSHA) || !manifests.IsCommit(c.HeadSHA) {
			return nil, nil, noop, errors.New("manifests mode needs the pull request's base and head commits (run on pull_request events)")
		}
		changes, err := manifests.Changed(ctx, c.Workspace, c.ManifestsDir, c.BaseSHA, c.HeadSHA, origin)
		if err != nil {
			return nil, nil, noop, fmt.Errorf("compare the manifests: %w", err)
		}
		head, err := manifests.Load(ctx, c.Workspace, c.ManifestsDir, c.HeadSHA, origin)
		if err != nil {
			return nil, nil, noop, fmt.Errorf("read the manifests at the head: %w", err)
		}
		// A Stack the pull request adds chooses its own key: the base
		// commit says which keys belong to other jobs.
		var owners *manifests.Owners
		if slices.ContainsFunc(changes, func(ch manifests.Change) bool { return ch.Added }) {
			own, err := manifests.ReadOwners(ctx, c.Workspace, c.BaseSHA, true, origin)
			if err != nil {
				return nil, nil, noop, fmt.Errorf("read the base commit's Stacks and projects: %w", err)
			}
			owners = &own
		}
		// The job's own backend is always allowed: a Stack naming it
		// sends the credentials nowhere new.
		backends := append([]string(nil), c.Backends...)
		if b := pulumiEnv.lookup("PULUMI_BACKEND_URL"); b != "" {
			backends = append(backends, b)
		}
		reqs, cleanup = manifests.PlanAll(ctx, changes, head, manifests.PlanOptions{
			GitToken: c.GitToken, TokenHosts: c.GitTokenHosts, Backends: backends, AllowLoopbackHTTP: d.AllowLoopbackHTTP,
			GitTimeout: c.GitTimeout, Owners: owners, ManifestsDir: c.ManifestsDir,
		})
	default:
		reqs = programRequests(ctx, c, pinned, origin)
	}
	contexts := make([]string, len(reqs))
	for i, r := range reqs {
		contexts[i] = StatusContext(r.Key)
	}
	return reqs, contexts, cleanup, nil
}

// stackKey is "<project>/<stack>"; a fully qualified stack name
// ("org/project/stack") is its own key, as is a stack of an unknown project.
func stackKey(project, stack string) string {
	if project == "" || strings.Count(stack, "/") == 2 {
		return stack
	}
	return project + "/" + stack
}
