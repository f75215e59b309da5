package pulumicloud

import (
	"fmt"
	"math"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/stackflow-io/stackflow/analysis/verification"
	"github.com/stackflow-io/stackflow/internal/revision"
)

// Kinds and results as the REST API spells them (AppUpdateKind,
// AppUpdateResult).
const (
	kindUpdate  = "update"
	kindPreview = "preview"
	// kindPupdate is "a preview of an update operation", the kind the
	// List Previews example shows.
	kindPupdate = "Pupdate"

	resultNotStarted = "not-started"
	resultInProgress = "in-progress"
	resultSucceeded  = "succeeded"
	resultFailed     = "failed"
)

// wanted reports whether an operation of kind answers the requested
// operation: up only kind update; preview only kinds preview and Pupdate
// (never a refresh or destroy, nor their previews).
func wanted(preview bool, kind string) bool {
	if preview {
		return kind == kindPreview || kind == kindPupdate
	}
	return kind == kindUpdate
}

// newestFirst orders updates by version (each update raises it) and
// previews, which share the version they ran against, by start time, a
// preview not started yet counting as the newest. Ties keep the API's
// order (newest first).
func newestFirst(ups []update, preview bool) {
	sort.SliceStable(ups, func(i, j int) bool {
		if preview {
			return startKey(ups[i]) > startKey(ups[j])
		}
		return ups[i].version > ups[j].version
	})
}

func startKey(u update) int64 {
	if u.start == 0 {
		return math.MaxInt64
	}
	return u.start
}

// decide fills r from the listed updates (or previews) of the stack.
func (c *Client) decide(r *verification.Result, k cacheKey, ups []update, q verification.Query) {
	now := r.ObservedAt
	stack := k.org + "/" + k.project + "/" + k.stack
	if !k.preview {
		all := append([]update(nil), ups...)
		newestFirst(all, false)
		for i, u := range all {
			if i == 0 {
				r.Stack.LastAttemptedCommit = verification.NewCommit(u.head)
			}
			if u.result == resultSucceeded {
				r.Stack.LastSuccessfulCommit = verification.NewCommit(u.head)
				break
			}
		}
	}
	var ofKind []update
	for _, u := range ups {
		if wanted(k.preview, u.kind) {
			ofKind = append(ofKind, u)
		}
	}
	newestFirst(ofKind, k.preview)
	var match *update
	for i := range ofKind {
		if verification.Matches(ofKind[i].head, q.Commit) {
			match = &ofKind[i]
			break
		}
	}
	if match == nil {
		r.Phase, r.Reason = verification.PhasePending, verification.ReasonAwaitingUpdate
		// ups is the page read: at most PageSize of the latest.
		where := fmt.Sprintf("the last %d updates of %s", len(ups), stack)
		if k.preview {
			where = fmt.Sprintf("the last %d previews of %s since its latest update", len(ups), stack)
		}
		if len(ofKind) == 0 {
			if k.preview {
				r.Message = fmt.Sprintf("no preview ran commit %s: %s has no preview since its latest update", revision.Short(q.Commit), stack)
			} else {
				r.Message = fmt.Sprintf("no update ran commit %s: %s has no update yet", revision.Short(q.Commit), stack)
			}
			return
		}
		latest := ofKind[0]
		r.Update = c.describe(k, latest)
		r.ObservedCommit = verification.NewCommit(latest.head)
		r.Message = fmt.Sprintf("no %s among %s ran commit %s; the latest, %s, %s (%s)",
			noun(k.preview), where, revision.Short(q.Commit), name(k.preview, latest), ranCommit(latest), latest.result)
		return
	}
	u := *match
	r.Update = c.describe(k, u)
	r.ObservedCommit = verification.NewCommit(u.head)
	subject := fmt.Sprintf("%s of %s at commit %s", name(k.preview, u), stack, revision.Short(u.head))
	switch u.result {
	case resultSucceeded:
		end := u.end
		if end == 0 {
			end = u.start
		}
		if q.Within > 0 {
			if age := now.Sub(time.Unix(end, 0)); end == 0 || age > q.Within {
				r.Phase, r.Reason = verification.PhasePending, verification.ReasonSucceededOutsideWindow
				r.Message = fmt.Sprintf("%s succeeded at %s, %s ago, longer ago than within=%s; run it again to verify it",
					subject, stamp(end), age.Round(time.Second), q.Within)
				return
			}
		}
		r.Phase, r.Reason = verification.PhaseSucceeded, verification.ReasonUpdateSucceeded
		r.Message = fmt.Sprintf("%s succeeded at %s", subject, stamp(end))
	case resultInProgress:
		r.Phase, r.Reason = verification.PhaseRunning, verification.ReasonUpdateInProgress
		r.Message = fmt.Sprintf("%s is in progress since %s", subject, stamp(u.start))
	case resultNotStarted:
		r.Phase, r.Reason = verification.PhaseRunning, verification.ReasonUpdateInProgress
		r.Message = fmt.Sprintf("%s is queued and has not started", subject)
	case resultFailed:
		r.Phase, r.Reason = verification.PhaseFailed, verification.ReasonUpdateFailed
		r.Message = fmt.Sprintf("%s failed at %s; a new %s of the commit may succeed", subject, stamp(u.end), noun(k.preview))
	default:
		r.Phase, r.Reason = verification.PhasePending, verification.ReasonCloudUnavailable
		r.Message = fmt.Sprintf("Pulumi Cloud reports %s with result %q, which this service does not know", subject, truncate(u.result, 32))
	}
}

// describe is the Update of a result.
func (c *Client) describe(k cacheKey, u update) *verification.Update {
	out := &verification.Update{
		Name:      strconv.Itoa(u.version),
		Type:      u.kind,
		State:     state(u.result),
		StartTime: unix(u.start),
		EndTime:   unix(u.end),
		Changes:   verification.NewChanges(u.changes),
	}
	switch u.kind {
	case kindUpdate:
		out.Type = "up"
		if c.console != "" && u.version > 0 {
			out.Permalink = c.console + "/" + url.PathEscape(k.org) + "/" + url.PathEscape(k.project) + "/" +
				url.PathEscape(k.stack) + "/updates/" + strconv.Itoa(u.version)
		}
	case kindPreview, kindPupdate:
		// Previews share the version they ran against: name them by ID.
		out.Type = "preview"
		if u.id != "" {
			out.Name = u.id
		}
	}
	return out
}

func state(result string) string {
	switch result {
	case resultInProgress:
		return verification.UpdateStateRunning
	case resultSucceeded:
		return verification.UpdateStateSucceeded
	case resultFailed:
		return verification.UpdateStateFailed
	default:
		return verification.UpdateStatePending
	}
}

func unix(s int64) *time.Time {
	if s <= 0 {
		return nil
	}
	t := time.Unix(s, 0).UTC()
	return &t
}

func stamp(s int64) string {
	if s <= 0 {
		return "an unknown time"
	}
	return time.Unix(s, 0).UTC().Format(time.RFC3339)
}

func noun(preview bool) string {
	if preview {
		return "preview"
	}
	return "update"
}

func name(preview bool, u update) string {
	if preview {
		if u.id != "" {
			return "preview " + u.id
		}
		return "a preview"
	}
	return "update " + strconv.Itoa(u.version)
}

func ranCommit(u update) string {
	if u.head == "" {
		return "recorded no commit (no git.head)"
	}
	return "ran commit " + revision.Short(u.head)
}
