package waiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/stackflow-io/stackflow/analysis/verification"
)

// Options says what to wait for.
type Options struct {
	// URL is the analysis service's base URL.
	URL string
	// Namespace and Stack name the Stack; Commit and Operation what it must
	// have done.
	Namespace, Stack, Commit string
	Operation                verification.Operation
	// Timeout bounds the whole wait.
	Timeout time.Duration
	// NotFoundAfter, when set, is sent with every request (notFoundAfter):
	// from then on the service answers Failed (StackNotFound) for a Stack
	// that does not exist, which ends the wait. The caller sets it to the
	// start of its wait plus its grace. Zero: a missing Stack is waited for
	// until Timeout.
	NotFoundAfter time.Time
	// DenyOn, when set, is sent with every request (denyOn): for a Stack
	// that requires approval, a plan of the commit with one of these
	// operations ends the wait Failed (PlanDenied) before anyone approves.
	DenyOn []string
	// TokenFile holds the bearer token, read before every request (a
	// projected ServiceAccount token rotates).
	TokenFile string
	// Token is the bearer token when there is no TokenFile; with neither,
	// none is sent.
	Token string
	// Client makes the requests (default: 35s timeout, above the long
	// poll).
	Client *http.Client
	// Poll is the long-poll wait asked of the service (default 25s).
	Poll time.Duration
	// Retry is the pause after a transient error (default 2s, doubling to
	// 30s).
	Retry time.Duration
	// Progress, when set, receives each answer that differs from the
	// previous one.
	Progress func(verification.Result)
}

// Outcome is how the wait ended.
type Outcome struct {
	// Result is the service's last answer (zero when there was none).
	Result verification.Result
	// Succeeded says the Stack applied the commit.
	Succeeded bool
	// Reason says why the wait ended: the answer's reason, or
	// Timeout, Unauthorized, Forbidden, BadRequest.
	Reason string
	// Message says it for a person.
	Message string
}

// Permanent errors: retrying cannot fix them.
var errPermanent = errors.New("permanent")

// Wait polls until the Stack has applied the commit (Succeeded), failed
// terminally (Failed), or the timeout passed. It returns an error only for
// bad options; every other end is an Outcome.
func Wait(ctx context.Context, o Options) (Outcome, error) {
	if err := o.validate(); err != nil {
		return Outcome{}, err
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: verification.MaxWait + 10*time.Second}
	}
	if o.Poll <= 0 || o.Poll > verification.MaxWait {
		o.Poll = verification.MaxWait
	}
	if o.Retry <= 0 {
		o.Retry = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	var last verification.Result
	var lastErr error
	pause := o.Retry
	for {
		poll := o.longPoll(ctx, time.Now())
		res, err := o.ask(ctx, poll)
		switch {
		case errors.Is(err, errPermanent):
			var he *httpError
			errors.As(err, &he)
			return Outcome{Result: last, Reason: he.reason, Message: he.Error()}, nil
		case err != nil:
			lastErr = err
			select {
			case <-ctx.Done():
				return timedOut(o, last, lastErr), nil
			case <-time.After(pause):
			}
			pause = min(pause*2, 30*time.Second)
			continue
		}
		pause, lastErr = o.Retry, nil
		if o.Progress != nil && (res.Phase != last.Phase || res.Reason != last.Reason || res.Message != last.Message) {
			o.Progress(res)
		}
		last = res
		switch res.Phase {
		case verification.PhaseSucceeded:
			return Outcome{Result: res, Succeeded: true, Reason: res.Reason, Message: res.Message}, nil
		case verification.PhaseFailed:
			return Outcome{Result: res, Reason: res.Reason, Message: res.Message}, nil
		}
		if ctx.Err() != nil {
			return timedOut(o, last, nil), nil
		}
	}
}

// longPoll is how long the next request may be held: o.Poll, shortened to
// end a second before the wait's deadline, and to end a second after
// NotFoundAfter while that is ahead (the service's long poll wakes on a
// change of the Stack, and the grace ending is none).
func (o Options) longPoll(ctx context.Context, now time.Time) time.Duration {
	poll := o.Poll
	if dl, ok := ctx.Deadline(); ok && dl.Sub(now) < poll+time.Second {
		poll = max(dl.Sub(now)-time.Second, time.Second)
	}
	if nf := o.NotFoundAfter.Sub(now); nf > 0 && nf+time.Second < poll {
		poll = nf + time.Second
	}
	return poll
}

func timedOut(o Options, last verification.Result, err error) Outcome {
	msg := fmt.Sprintf("Stack %s/%s did not apply %s within %s", o.Namespace, o.Stack, o.Commit, o.Timeout)
	if last.Phase != "" {
		msg += fmt.Sprintf("; last answer: %s (%s): %s", last.Phase, last.Reason, last.Message)
	}
	if err != nil {
		msg += "; last error: " + err.Error()
	}
	return Outcome{Result: last, Reason: "Timeout", Message: msg}
}

func (o Options) validate() error {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--url %q is not an http(s) URL of the analysis service (e.g. http://stackflow-analysis.stackflow-system.svc:8080)", o.URL)
	}
	if o.Namespace == "" || o.Stack == "" {
		return errors.New("--namespace and --stack name the Stack to wait for")
	}
	if !verification.IsCommit(strings.ToLower(o.Commit)) {
		return fmt.Errorf("--commit %q is not a commit SHA (7 to 40 hexadecimal characters)", o.Commit)
	}
	if o.Operation != verification.OperationUp && o.Operation != verification.OperationPreview {
		return fmt.Errorf("--operation %q: use up or preview", o.Operation)
	}
	if o.Timeout <= 0 {
		return errors.New("--timeout must be positive")
	}
	return nil
}

// httpError is an answer other than 200.
type httpError struct {
	code   int
	reason string
	msg    string
}

func (e *httpError) Error() string {
	return fmt.Sprintf("the analysis service answered HTTP %d (%s): %s", e.code, e.reason, e.msg)
}

func (e *httpError) Unwrap() error {
	switch e.code {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		return errPermanent
	}
	return nil
}

func (o Options) ask(ctx context.Context, poll time.Duration) (verification.Result, error) {
	q := url.Values{"commit": {strings.ToLower(o.Commit)}, "operation": {string(o.Operation)}, "wait": {poll.Round(time.Second).String()}}
	if !o.NotFoundAfter.IsZero() {
		q.Set("notFoundAfter", o.NotFoundAfter.UTC().Format(time.RFC3339))
	}
	if len(o.DenyOn) > 0 {
		q.Set("denyOn", strings.Join(o.DenyOn, ","))
	}
	u := strings.TrimSuffix(o.URL, "/") + "/v1/namespaces/" + url.PathEscape(o.Namespace) + "/stacks/" + url.PathEscape(o.Stack) + "/verification?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return verification.Result{}, err
	}
	switch {
	case o.TokenFile != "":
		b, err := os.ReadFile(o.TokenFile)
		if err != nil {
			return verification.Result{}, fmt.Errorf("read the token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(b)))
	case o.Token != "":
		req.Header.Set("Authorization", "Bearer "+o.Token)
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		return verification.Result{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return verification.Result{}, err
	}
	if resp.StatusCode != http.StatusOK {
		var e verification.Error
		if json.Unmarshal(body, &e) != nil || e.Reason == "" {
			e.Reason, e.Message = http.StatusText(resp.StatusCode), strings.TrimSpace(truncate(string(body), 200))
		}
		return verification.Result{}, &httpError{code: resp.StatusCode, reason: e.Reason, msg: e.Message}
	}
	var r verification.Result
	if err := json.Unmarshal(body, &r); err != nil || r.Phase == "" {
		return verification.Result{}, fmt.Errorf("the answer is not a verification (is --url the analysis service?): %s", truncate(string(body), 200))
	}
	return r, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
