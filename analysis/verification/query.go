package verification

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// MaxWait bounds a long poll (&wait=): below the 30 s timeouts of most HTTP
// clients, Argo Rollouts' web provider (timeoutSeconds default 10) needs a
// raised timeoutSeconds to use it.
const MaxWait = 25 * time.Second

// Query is a parsed verification request.
type Query struct {
	// Commit is the requested commit: 7 to 40 hexadecimal characters, lower
	// case.
	Commit string
	// Operation is up (default) or preview.
	Operation Operation
	// Within, when set, requires the success to be at most this old.
	Within time.Duration
	// Wait, when set, holds the request until the phase changes or Wait
	// has passed (at most MaxWait).
	Wait time.Duration
	// NotFoundAfter, when set, is when the caller stops expecting a missing
	// Stack to appear: from then on a Stack that does not exist is Failed
	// (StackNotFound) instead of Pending. The caller computes it (the time
	// its wait began plus its grace), so the service keeps no state between
	// requests.
	NotFoundAfter time.Time
	// DenyOn, when set, lists planned operations (create, update, delete,
	// replace) that fail the verification before anything is applied: a
	// Stack requiring approval whose plan of the commit has one of them is
	// Failed (PlanDenied) while it awaits approval. delete includes replace
	// (a replacement deletes the old resource). A Stack that does not
	// require approval applies without a plan to check: Failed
	// (ApprovalNotRequired). "none" denies nothing.
	DenyOn []string
}

// ParseDenyOn reads a denyOn list: comma-separated operations among create,
// update, delete and replace, without repeats; "" and "none" (the value of
// a caller that cannot leave a parameter out: Kargo's http step) deny
// nothing.
func ParseDenyOn(d string) ([]string, error) {
	if d == "" || d == "none" {
		return nil, nil
	}
	var ops []string
	seen := map[string]bool{}
	for _, op := range strings.Split(d, ",") {
		op = strings.TrimSpace(op)
		if !denyOnOps[op] {
			return nil, queryErrorf("denyOn %q names %q: use a comma-separated list of create, update, delete (which includes replace) and replace", cut(d, 64), cut(op, 32))
		}
		if !seen[op] {
			seen[op] = true
			ops = append(ops, op)
		}
	}
	return ops, nil
}

// denyOnOps are the operations denyOn may name.
var denyOnOps = map[string]bool{"create": true, "update": true, "delete": true, "replace": true}

// NotFoundIsFinal reports whether a Stack that does not exist at now is a
// terminal failure: the caller set NotFoundAfter and it has come.
func (q Query) NotFoundIsFinal(now time.Time) bool {
	return !q.NotFoundAfter.IsZero() && !now.Before(q.NotFoundAfter)
}

// QueryError is a malformed request; its message says how to fix it.
type QueryError struct{ msg string }

func (e *QueryError) Error() string { return e.msg }

func queryErrorf(format string, args ...any) error {
	return &QueryError{msg: fmt.Sprintf(format, args...)}
}

// known query parameters; any other is refused, so a typo (comit=) does not
// silently verify nothing.
var known = map[string]bool{"commit": true, "operation": true, "within": true, "wait": true, "notFoundAfter": true, "denyOn": true}

// ParseQuery parses the query of a verification request. commit is
// required; operation defaults to up.
func ParseQuery(v url.Values) (Query, error) {
	for k := range v {
		if !known[k] {
			return Query{}, queryErrorf("unknown query parameter %q: use commit, operation, within, wait, notFoundAfter and denyOn", cut(k, 64))
		}
	}
	for k, vals := range v {
		if len(vals) > 1 {
			return Query{}, queryErrorf("query parameter %q is given %d times; give it once", k, len(vals))
		}
	}
	var q Query
	c := strings.ToLower(v.Get("commit"))
	if c == "" {
		return Query{}, queryErrorf("commit is required: the 7 to 40 hexadecimal characters of a commit SHA (in Kargo, ${{ commitFrom(vars.repoURL).ID }})")
	}
	if !IsCommit(c) {
		return Query{}, queryErrorf("commit %q is not a commit SHA: expected 7 to 40 hexadecimal characters", cut(c, 64))
	}
	q.Commit = c
	switch op := v.Get("operation"); op {
	case "", string(OperationUp):
		q.Operation = OperationUp
	case string(OperationPreview):
		q.Operation = OperationPreview
	default:
		return Query{}, queryErrorf("unknown operation %q: use up or preview", cut(op, 64))
	}
	var err error
	if q.Within, err = duration(v, "within", 0); err != nil {
		return Query{}, err
	}
	if q.Wait, err = duration(v, "wait", MaxWait); err != nil {
		return Query{}, err
	}
	if q.NotFoundAfter, err = instant(v, "notFoundAfter"); err != nil {
		return Query{}, err
	}
	if q.DenyOn, err = ParseDenyOn(v.Get("denyOn")); err != nil {
		return Query{}, err
	}
	return q, nil
}

func duration(v url.Values, name string, max time.Duration) (time.Duration, error) {
	s := v.Get(name)
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, queryErrorf("%s %q is not a duration: use Go's form, such as 90s, 15m or 1h", name, cut(s, 64))
	}
	if d <= 0 {
		return 0, queryErrorf("%s must be positive, not %s", name, s)
	}
	if max > 0 && d > max {
		return 0, queryErrorf("%s %s is too long: at most %s", name, s, max)
	}
	return d, nil
}

// instant parses an RFC 3339 time (UTC); zero when absent.
func instant(v url.Values, name string) (time.Time, error) {
	s := v.Get(name)
	if s == "" {
		return time.Time{}, nil
	}
	// RFC 3339 takes at most 35 characters (nanoseconds and an offset).
	if len(s) <= 40 {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, queryErrorf("%s %q is not a time: use RFC 3339, such as 2026-12-01T12:05:00Z", name, cut(s, 64))
}

// IsCommit reports whether s is 7 to 40 lower-case hexadecimal characters.
func IsCommit(s string) bool {
	if len(s) < 7 || len(s) > 40 {
		return false
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

// CommitSHA is the commit SHA in a revision: the revision itself, or the
// part after "sha1:"/"sha256:" of a Flux-style artifact revision
// ("main@sha1:<sha>"); lower case.
func CommitSHA(rev string) string {
	if i := strings.LastIndex(rev, ":"); i >= 0 {
		rev = rev[i+1:]
	}
	return strings.ToLower(rev)
}

// Matches reports whether a revision is the requested commit: the requested
// (possibly abbreviated) SHA is a prefix of the revision's SHA.
func Matches(rev, commit string) bool {
	sha := CommitSHA(rev)
	return commit != "" && len(sha) >= len(commit) && strings.HasPrefix(sha, commit)
}
