package githubapi

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/google/go-github/v60/github"

	"github.com/stackflow-io/stackflow/github-action/report"
)

// ErrLostRace is returned (wrapped) when every attempt's write was lost to
// concurrent writers.
var ErrLostRace = errors.New("githubapi: comment kept being overwritten by concurrent jobs")

// UpsertSection merges this job's sections (from report.Section) into the
// pull request's Stackflow comment, creating it if there is none, and
// returns the comment's HTML URL.
//
// Which comment: every comment on the PR is listed (per_page 100, all
// pages); a comment is ours if it has report.TopMarker and its author is
// the token's identity. An installation token (the workflow's
// GITHUB_TOKEN, a GitHub App's: "ghs_…") acts as a bot, so the author must
// be a Bot named "github-actions[bot]" or "<AppSlug>[bot]"; GET /user,
// which refuses such tokens, is not called. For another token the author
// must be its user (GET /user, same id and login), or a bot as above when
// GET /user is refused.
//
// sections may be empty: with o.Scope, that removes every section of the
// scope (a pull request that no longer changes any Stack); a comment left
// without sections says nothing changes.
// If several comments are ours (left by an old race), the oldest is used
// and the others are left alone; a duplicate this call itself created in a
// race is deleted.
//
// How: read-modify-write with report.Comment (other keys' sections kept,
// this job's replaced), just before writing the comment is re-read and the
// merge redone if it changed; after writing it is re-read to confirm every
// one of this job's sections is there with the content written (by the
// sections' digests), and once more after Options.Settle. If another job's
// write lost ours, the whole cycle is retried with jittered exponential
// backoff, up to Options.MaxAttempts. GitHub offers no conditional update
// of a comment, so this narrows the race window rather than closing it: a
// job whose write is overwritten after its final check, by a job that had
// read the body before that write, loses its section; the next run
// restores it, and the job summary and commit status are unaffected.
//
// A 403 or 404 is returned as *ReadOnlyError, a 422 for the body's length
// as *BodyTooLongError; neither is retried.
func (c *Client) UpsertSection(ctx context.Context, repo string, pr int, o report.CommentOptions, sections ...string) (string, error) {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return "", err
	}
	want := map[string]string{}
	for _, s := range sections {
		info, err := report.ParseSection(s)
		if err != nil {
			return "", err
		}
		want[info.Key] = info.Digest
	}
	if o.Limit <= 0 || o.Limit > report.MaxCommentLen {
		o.Limit = report.MaxCommentLen
	}
	me, err := c.identity(ctx)
	if err != nil {
		return "", err
	}
	for attempt := 1; ; attempt++ {
		u, ok, err := c.upsertOnce(ctx, owner, name, pr, me, o, sections, want)
		if err != nil || ok {
			return u, err
		}
		if attempt >= c.opts.MaxAttempts {
			return "", fmt.Errorf("%w (%d attempts on %s#%d)", ErrLostRace, attempt, repo, pr)
		}
		d := c.opts.BaseDelay << min(attempt-1, 4)
		d = d/2 + rand.N(d/2+1)
		if err := sleep(ctx, d); err != nil {
			return "", err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// gone reports a 404 on a comment we had just seen: deleted by a
// concurrent job (its duplicate), so retry rather than fail.
func gone(err error) bool {
	var ro *ReadOnlyError
	return errors.As(err, &ro) && ro.StatusCode == http.StatusNotFound
}

// upsertOnce is one read-modify-write-verify cycle; ok false means retry.
func (c *Client) upsertOnce(ctx context.Context, owner, name string, pr int, me *github.User,
	o report.CommentOptions, sections []string, want map[string]string) (string, bool, error) {
	found, err := c.find(ctx, owner, name, pr, me)
	if err != nil {
		return "", false, err
	}
	var target *github.IssueComment
	existing := ""
	if len(found) > 0 {
		target = found[0]
		existing = target.GetBody()
	}
	body, err := report.Comment(existing, sections, o)
	if err != nil {
		return "", false, err
	}
	if n := report.Len(body); n > report.MaxCommentLen { // report.Comment guarantees not; never send one
		return "", false, &BodyTooLongError{Op: "merge comment", Length: n, Message: "not sent: over GitHub's limit"}
	}
	if target == nil {
		created, _, err := c.gh.Issues.CreateComment(ctx, owner, name, pr, &github.IssueComment{Body: github.String(body)})
		if err != nil {
			return "", false, classify("create comment", err, body)
		}
		// Another job may have created one at the same time: the oldest
		// wins, ours is deleted and the merge redone into the oldest.
		found, err := c.find(ctx, owner, name, pr, me)
		if err != nil {
			return "", false, err
		}
		if len(found) > 0 && found[0].GetID() != created.GetID() {
			_, _ = c.gh.Issues.DeleteComment(ctx, owner, name, created.GetID())
			return "", false, nil
		}
		target = created
	} else {
		// Narrow the race: if the comment changed since listed, re-merge.
		cur, _, err := c.gh.Issues.GetComment(ctx, owner, name, target.GetID())
		if err != nil {
			if err := classify("get comment", err, ""); gone(err) {
				return "", false, nil
			} else {
				return "", false, err
			}
		}
		if cur.GetBody() != existing {
			return "", false, nil
		}
		if body != existing {
			if _, _, err := c.gh.Issues.EditComment(ctx, owner, name, target.GetID(), &github.IssueComment{Body: github.String(body)}); err != nil {
				if err := classify("edit comment", err, body); gone(err) {
					return "", false, nil
				} else {
					return "", false, err
				}
			}
		}
	}
	ok, err := c.confirm(ctx, owner, name, target.GetID(), want, o.Scope)
	if err != nil || !ok {
		return "", false, err
	}
	if c.opts.Settle > 0 {
		if err := sleep(ctx, c.opts.Settle); err != nil {
			return "", false, err
		}
		if ok, err := c.confirm(ctx, owner, name, target.GetID(), want, o.Scope); err != nil || !ok {
			return "", false, err
		}
	}
	return target.GetHTMLURL(), true, nil
}

// confirm re-reads the comment and checks every wanted section is there
// with the digest written, and (with a scope) no other section of the
// scope is.
func (c *Client) confirm(ctx context.Context, owner, name string, id int64, want map[string]string, scope string) (bool, error) {
	cur, _, err := c.gh.Issues.GetComment(ctx, owner, name, id)
	if err != nil {
		if err := classify("get comment", err, ""); gone(err) {
			return false, nil
		} else {
			return false, err
		}
	}
	have := map[string]string{}
	for _, p := range report.Sections(cur.GetBody()) {
		have[p.Key] = p.Info.Digest
		if _, wanted := want[p.Key]; scope != "" && p.Info.Scope == scope && !wanted {
			return false, nil // a concurrent writer put a stale one back
		}
	}
	for k, d := range want {
		if have[k] != d {
			return false, nil
		}
	}
	return true, nil
}
