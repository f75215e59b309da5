package kargoe2e

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/stackflow-io/stackflow/github-action/action"
	"github.com/stackflow-io/stackflow/github-action/githubapi"
	"github.com/stackflow-io/stackflow/github-action/inputs"
	"github.com/stackflow-io/stackflow/github-action/report"
	"github.com/stackflow-io/stackflow/test/framework/fakegithub"
	"github.com/stackflow-io/stackflow/test/framework/kargo"
)

// previewPullRequest runs Stackflow's GitHub Action in manifests mode on the
// pull request Kargo's stackflow-promote-pr opened, as a workflow `on:
// pull_request` of the manifests repository runs it (actions/checkout of
// the head, the workflow's token, GitHub Enterprise Server's API as Kargo
// reaches it): the Action previews web-prod at the Freight's commit,
// against prod's stack in the backend, and comments the preview on the pull
// request, with a commit status on its head, before the reviewer merges. It
// checks that web-prod's section says what the Freight changes: it creates
// creates resources.
func (p *pipeline) previewPullRequest(ctx context.Context, pr fakegithub.PullRequest, creates int) {
	t := p.t
	ws := filepath.Join(t.TempDir(), "manifests")
	git := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, "git", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("clone", "-q", p.GitHub.Bare(kargo.ManifestsOwner, kargo.ManifestsRepo), ws)
	git("-C", ws, "checkout", "-q", pr.HeadSHA)
	base := git("-C", ws, "rev-parse", "origin/"+pr.Base)
	dir := t.TempDir()
	repo := kargo.ManifestsOwner + "/" + kargo.ManifestsRepo
	c := inputs.Config{Mode: inputs.ModeManifests, ManifestsDir: "prod", GitHubToken: githubToken, GitToken: githubToken,
		Comment: inputs.CommentAlways, StatusChecks: true, Parallel: 1, Repository: repo, APIURL: p.GitHub.EnterpriseURL(),
		ServerURL: "https://" + kargo.GitHubHost, RunID: "1", Workspace: ws, StepSummaryFile: filepath.Join(dir, "summary.md"),
		OutputFile: filepath.Join(dir, "output"), PR: pr.Number, HeadSHA: pr.HeadSHA, BaseSHA: base, NotPreviewed: "failure",
		GitTimeout: time.Minute, PreviewTimeout: 5 * time.Minute, Workflow: repo + "/.github/workflows/preview-promotion.yml",
		EventName: "pull_request", HeadRepo: repo, BaseRepo: repo}
	var log bytes.Buffer
	d := action.Deps{PulumiCommand: p.pe.Command(t), Env: p.pe.EnvVars(), AllowLoopbackHTTP: true, GitHub: githubapi.Options{Settle: 10 * time.Millisecond}}
	if code := action.Run(ctx, c, d, &log); code != 0 {
		t.Fatalf("the GitHub Action on pull request #%d exited %d:\n%s", pr.Number, code, log.String())
	}
	comments := p.GitHub.Comments(kargo.ManifestsOwner, kargo.ManifestsRepo, pr.Number)
	if len(comments) != 1 {
		t.Fatalf("pull request #%d has %d comments after the Action, want its preview:\n%s", pr.Number, len(comments), log.String())
	}
	sec, ok := report.Find(comments[0].Body, kargo.ExampleStackNamespace+"/web-prod")
	if !ok || sec.Info.Status != "succeeded" || sec.Info.Changes.Create != creates {
		t.Fatalf("pull request #%d's preview of web-prod: %+v, want succeeded creating %d:\n%s", pr.Number, sec.Info, creates, comments[0].Body)
	}
	var states []string
	for _, s := range p.GitHub.Statuses(kargo.ManifestsOwner, kargo.ManifestsRepo, pr.HeadSHA) {
		states = append(states, s.State)
	}
	if len(states) == 0 || states[len(states)-1] != "success" {
		t.Fatalf("commit statuses on pull request #%d's head: %v, want a success", pr.Number, states)
	}
	t.Logf("prod: the GitHub Action (manifests mode) previewed pull request #%d: web-prod creates %d, comment and status on its head", pr.Number, sec.Info.Changes.Create)
}
