// Package githubapi is the GitHub Action's GitHub client, on
// github.com/google/go-github/v60: it upserts this job's sections of the
// one aggregated pull-request comment (UpsertSection) and sets commit
// statuses usable as required checks (SetStatus).
//
// The comment is found by report.TopMarker and by author (see
// UpsertSection for the exact rule; an installation token, the workflow's
// GITHUB_TOKEN among them, is known to act as a bot without asking
// GET /user, which refuses it). A write with a scope also removes that
// scope's sections it does not carry (manifests mode: Stacks no longer
// changed). GitHub has no conditional update for
// comments, so concurrent jobs (a matrix) are reconciled optimistically:
// read-modify-write, re-read to confirm this job's sections survived, and
// retry with jittered backoff if another job's write lost them.
//
// Failures a caller should only warn about are typed: ReadOnlyError (403 or
// 404 writing a comment or status, as a fork PR's read-only token gets) and
// BodyTooLongError (422, body over GitHub's limit).
//
// It imports the standard library, go-github and
// github.com/stackflow-io/stackflow/github-action/report (rendering);
// its tests use the repository's fake GitHub (test/framework/fakegithub).
package githubapi
