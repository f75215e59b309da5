package pulumicloud

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stackflow-io/stackflow/analysis/verification"
	"github.com/stackflow-io/stackflow/internal/redact"
)

// Defaults.
const (
	// DefaultBaseURL is the managed Pulumi Cloud API.
	DefaultBaseURL = "https://api.pulumi.com"
	// DefaultConsoleURL is the managed Pulumi Cloud console.
	DefaultConsoleURL = "https://app.pulumi.com"
	// DefaultCacheTTL is how long an API answer is reused.
	DefaultCacheTTL = 10 * time.Second
	// DefaultCacheSize bounds the cache (stack and route pairs).
	DefaultCacheSize = 1000
	// DefaultPageSize is how many recent updates (or previews) are read.
	DefaultPageSize = 25
	// MaxPageSize bounds Options.PageSize.
	MaxPageSize = 100
	// MaxNameLength bounds an organization, project or stack name, as
	// Pulumi bounds project and stack names.
	MaxNameLength = 100

	// accept is the documented API version header value.
	accept = "application/vnd.pulumi+8"
	// maxBody bounds an answer read from the API.
	maxBody = 8 << 20
	// maxRetryAfter bounds how long a 429's Retry-After keeps the cached
	// answer.
	maxRetryAfter = 5 * time.Minute
)

// Options configure a Client. Only Token is required.
type Options struct {
	// BaseURL is the API endpoint, default https://api.pulumi.com (a
	// self-hosted Pulumi Cloud's API URL otherwise).
	BaseURL string
	// ConsoleURL is the console the permalinks point to. Default
	// https://app.pulumi.com when BaseURL is the default, none otherwise
	// (then answers carry no permalink).
	ConsoleURL string
	// Token returns the access token (read from a Kubernetes Secret by the
	// caller). It is called for every request to the API, so a rotated
	// token is used as soon as the caller returns it.
	Token func(ctx context.Context) (string, error)
	// HTTPClient sends the requests. Default: a client with a Timeout
	// overall and 5 s dial and TLS handshake timeouts.
	HTTPClient *http.Client
	// Timeout bounds each request to the API, from the connection to the
	// last byte of the answer (itself at most 8 MiB), for the default
	// HTTPClient; default DefaultTimeout.
	Timeout time.Duration
	// CacheTTL is how long an answer of the API (a list, or an error) is
	// reused for the same stack and operation, default 10 s; a 429 is
	// reused for as long as its Retry-After asks (at most 5 min). Negative
	// disables the cache but for that 429 rule (in-flight requests are
	// still shared).
	CacheTTL time.Duration
	// CacheSize bounds the cache, default 1,000 entries; the oldest entry
	// is evicted first.
	CacheSize int
	// PageSize is how many of the latest updates (or previews) are read,
	// default 25, at most 100. A commit whose update is older than that is
	// answered Pending.
	PageSize int
	// Now is the clock, default time.Now.
	Now func() time.Time
}

// Client answers verifications from Pulumi Cloud. It is safe for
// concurrent use.
type Client struct {
	base     string
	console  string
	token    func(ctx context.Context) (string, error)
	hc       *http.Client
	ttl      time.Duration
	size     int
	pageSize int
	now      func() time.Time

	mu       sync.Mutex
	entries  map[cacheKey]*entry
	order    *list.List // of *entry, oldest stored first
	inflight map[cacheKey]*call
}

type cacheKey struct {
	org, project, stack string
	preview             bool
}

type entry struct {
	key     cacheKey
	out     outcome
	expires time.Time
	elem    *list.Element
}

type call struct {
	done chan struct{}
	out  outcome
	// joined counts the callers that found the request in flight.
	joined int
}

// New returns a Client.
func New(o Options) *Client {
	c := &Client{
		base:     strings.TrimRight(o.BaseURL, "/"),
		console:  strings.TrimRight(o.ConsoleURL, "/"),
		token:    o.Token,
		hc:       o.HTTPClient,
		ttl:      o.CacheTTL,
		size:     o.CacheSize,
		pageSize: o.PageSize,
		now:      o.Now,
		entries:  map[cacheKey]*entry{},
		order:    list.New(),
		inflight: map[cacheKey]*call{},
	}
	if c.base == "" {
		c.base = DefaultBaseURL
	}
	if c.console == "" && c.base == DefaultBaseURL {
		c.console = DefaultConsoleURL
	}
	if c.hc == nil {
		timeout := o.Timeout
		if timeout <= 0 {
			timeout = DefaultTimeout
		}
		c.hc = defaultHTTPClient(timeout)
	}
	if c.ttl == 0 {
		c.ttl = DefaultCacheTTL
	}
	if c.size <= 0 {
		c.size = DefaultCacheSize
	}
	if c.pageSize <= 0 {
		c.pageSize = DefaultPageSize
	}
	c.pageSize = min(c.pageSize, MaxPageSize)
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

// DefaultTimeout bounds a request to the Pulumi Cloud API
// (--pulumi-cloud-timeout).
const DefaultTimeout = 10 * time.Second

func defaultHTTPClient(timeout time.Duration) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: min(5*time.Second, timeout), KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = min(5*time.Second, timeout)
	t.ResponseHeaderTimeout = timeout
	return &http.Client{Timeout: timeout, Transport: t}
}

// ValidName reports whether s can be a Pulumi organization, project or
// stack name: 1 to 100 letters, digits, '-', '_' and '.', and not "." or
// "..". The server answers 400 to any other path segment.
func ValidName(s string) bool {
	if s == "" || len(s) > MaxNameLength || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-' || b == '_' || b == '.') {
			return false
		}
	}
	return true
}

// Verify answers a verification for org/project/stack. It never returns
// an error for API trouble: 429, 5xx and network errors are Pending,
// reason CloudUnavailable, with a message (never a false Failed); 401 and
// 403 are Pending, reason CloudUnauthorized, saying which status and that
// the token is wrong; 404 is Pending, reason StackNotFound, and Failed once
// the query's NotFoundAfter has come.
func (c *Client) Verify(ctx context.Context, org, project, stack string, q verification.Query) verification.Result {
	op := q.Operation
	if op == "" {
		op = verification.OperationUp
	}
	r := verification.Result{
		Phase:           verification.PhasePending,
		Operation:       op,
		RequestedCommit: verification.NewCommit(q.Commit),
		Stack:           verification.StackRef{Organization: org, Project: project, Name: stack},
	}
	for _, n := range []string{org, project, stack} {
		if !ValidName(n) {
			r.Stack = verification.StackRef{}
			r.Reason = verification.ReasonStackNotFound
			r.Message = "organization, project and stack must be Pulumi names: 1 to 100 letters, digits, '-', '_' or '.'"
			r.ObservedAt = c.now()
			return r
		}
	}
	k := cacheKey{org: org, project: project, stack: stack, preview: op == verification.OperationPreview}
	out := c.get(ctx, k)
	r.ObservedAt = c.now()
	if out.fail != nil {
		r.Reason, r.Message = out.fail.reason, out.fail.message
		if r.Reason == verification.ReasonStackNotFound && q.NotFoundIsFinal(r.ObservedAt) {
			// The caller stopped expecting the stack (notFoundAfter).
			r.Phase = verification.PhaseFailed
			r.Message += fmt.Sprintf("; the caller waited for it until %s (notFoundAfter)", q.NotFoundAfter.Format(time.RFC3339))
		}
		return r
	}
	c.decide(&r, k, out.updates, q)
	return r
}

// outcome is what one request to the API gave: the updates, or why not.
type outcome struct {
	updates []update
	fail    *failure
}

type failure struct {
	reason, message string
	// retryAfter is a 429's Retry-After.
	retryAfter time.Duration
}

// update is what is kept of an API UpdateInfo: nothing but names,
// numbers, times, the result and git.head.
type update struct {
	id      string
	kind    string
	result  string
	start   int64
	end     int64
	version int
	head    string
	changes map[string]int64
}

// Wire shapes: the service output type of List Stack Updates and List
// Previews (GetStackUpdatesResponse of UpdateInfo). Only the fields used
// are declared, so config, the rest of the environment, requestedBy and
// requestedByToken are never decoded or kept.
type wireList struct {
	Updates []wireUpdate `json:"updates"`
}

type wireUpdate struct {
	UpdateID string `json:"updateID"`
	Version  int    `json:"version"`
	Info     struct {
		Kind        string `json:"kind"`
		Result      string `json:"result"`
		StartTime   int64  `json:"startTime"`
		EndTime     int64  `json:"endTime"`
		Version     int    `json:"version"`
		Environment struct {
			GitHead string `json:"git.head"`
		} `json:"environment"`
		ResourceChanges map[string]int64 `json:"resourceChanges"`
	} `json:"info"`
}

// get returns the cached outcome for k, or fetches it, sharing one
// request among concurrent callers. The request is not tied to ctx (other
// callers may wait for it; the HTTP client's timeouts bound it); a caller
// whose ctx ends stops waiting.
func (c *Client) get(ctx context.Context, k cacheKey) outcome {
	c.mu.Lock()
	if e := c.entries[k]; e != nil {
		if c.now().Before(e.expires) {
			c.mu.Unlock()
			return e.out
		}
		c.remove(e)
	}
	cl := c.inflight[k]
	if cl == nil {
		cl = &call{done: make(chan struct{})}
		c.inflight[k] = cl
		go c.run(context.WithoutCancel(ctx), k, cl)
	} else {
		cl.joined++
	}
	c.mu.Unlock()
	select {
	case <-cl.done:
		return cl.out
	case <-ctx.Done():
		return outcome{fail: &failure{
			reason:  verification.ReasonCloudUnavailable,
			message: "the request ended before Pulumi Cloud answered (" + ctx.Err().Error() + ")",
		}}
	}
}

func (c *Client) run(ctx context.Context, k cacheKey, cl *call) {
	out := c.fetch(ctx, k)
	c.mu.Lock()
	c.store(k, out)
	cl.out = out
	delete(c.inflight, k)
	c.mu.Unlock()
	close(cl.done)
}

// store caches out (c.mu held), evicting the oldest entries beyond the
// bound.
func (c *Client) store(k cacheKey, out outcome) {
	ttl := c.ttl
	if out.fail != nil && out.fail.retryAfter > ttl {
		ttl = min(out.fail.retryAfter, maxRetryAfter)
	}
	if ttl <= 0 {
		return
	}
	if old := c.entries[k]; old != nil {
		c.remove(old)
	}
	for len(c.entries) >= c.size {
		c.remove(c.order.Front().Value.(*entry))
	}
	e := &entry{key: k, out: out, expires: c.now().Add(ttl)}
	e.elem = c.order.PushBack(e)
	c.entries[k] = e
}

func (c *Client) remove(e *entry) {
	c.order.Remove(e.elem)
	delete(c.entries, e.key)
}

// CacheLen is how many answers are cached (for tests and metrics).
func (c *Client) CacheLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// fetch asks the API for the latest updates (or previews) of a stack.
func (c *Client) fetch(ctx context.Context, k cacheKey) outcome {
	path := "/api/stacks/" + url.PathEscape(k.org) + "/" + url.PathEscape(k.project) + "/" + url.PathEscape(k.stack)
	var query string
	if k.preview {
		path += "/updates/latest/previews"
		query = "asc=false&page=1&pageSize=" + strconv.Itoa(c.pageSize)
	} else {
		path += "/updates"
		query = "output-type=service&page=1&pageSize=" + strconv.Itoa(c.pageSize)
	}
	unavailable := func(format string, args ...any) outcome {
		return outcome{fail: &failure{reason: verification.ReasonCloudUnavailable, message: fmt.Sprintf(format, args...)}}
	}
	if c.token == nil {
		return outcome{fail: &failure{reason: verification.ReasonCloudUnauthorized,
			message: "no Pulumi Cloud access token is configured"}}
	}
	token, err := c.token(ctx)
	if err != nil {
		return outcome{fail: &failure{reason: verification.ReasonCloudUnauthorized,
			message: "the Pulumi Cloud access token could not be read: " + truncate(err.Error(), 200)}}
	}
	if token == "" {
		return outcome{fail: &failure{reason: verification.ReasonCloudUnauthorized,
			message: "the Pulumi Cloud access token is empty"}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path+"?"+query, nil)
	if err != nil {
		return unavailable("the Pulumi Cloud URL %q is not usable: %v", c.base, err)
	}
	req.Header.Set("Authorization", "token "+token)
	req.Header.Set("Accept", accept)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return unavailable("Pulumi Cloud (%s) could not be reached: %s", req.URL.Host, netError(err, token))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return unavailable("Pulumi Cloud's answer could not be read: %s", netError(err, token))
	}
	what := fmt.Sprintf("GET %s", path)
	status := fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	switch code := resp.StatusCode; {
	case code == http.StatusOK:
	case code == http.StatusUnauthorized:
		return outcome{fail: &failure{reason: verification.ReasonCloudUnauthorized, message: fmt.Sprintf(
			"Pulumi Cloud answered %s to %s: the access token is missing, invalid, expired or revoked; replace it in the Secret the service reads", status, what)}}
	case code == http.StatusForbidden:
		return outcome{fail: &failure{reason: verification.ReasonCloudUnauthorized, message: fmt.Sprintf(
			"Pulumi Cloud answered %s to %s: the access token may not read this stack; use a token of an identity with read access to %s/%s/%s", status, what, k.org, k.project, k.stack)}}
	case code == http.StatusNotFound:
		return outcome{fail: &failure{reason: verification.ReasonStackNotFound, message: fmt.Sprintf(
			"Pulumi Cloud has no stack %s/%s/%s (%s), or the access token cannot see it", k.org, k.project, k.stack, status)}}
	case code == http.StatusTooManyRequests:
		ra := retryAfter(resp.Header.Get("Retry-After"), c.now())
		msg := fmt.Sprintf("Pulumi Cloud is rate limiting this service (%s to %s)", status, what)
		if ra > 0 {
			msg += fmt.Sprintf("; it asks to retry after %s", ra.Round(time.Second))
		}
		return outcome{fail: &failure{reason: verification.ReasonCloudUnavailable, message: msg, retryAfter: ra}}
	case code >= 500:
		return unavailable("Pulumi Cloud answered %s to %s; the verification stays Pending until it answers", status, what)
	default:
		return unavailable("Pulumi Cloud answered %s to %s, which this service does not expect", status, what)
	}
	if len(body) > maxBody {
		return unavailable("Pulumi Cloud's answer to %s is larger than %d bytes", what, maxBody)
	}
	var wl wireList
	if err := json.Unmarshal(body, &wl); err != nil {
		return unavailable("Pulumi Cloud's answer to %s is not the documented JSON: %s", what, truncate(err.Error(), 200))
	}
	ups := make([]update, 0, len(wl.Updates))
	for _, w := range wl.Updates {
		v := w.Version
		if v == 0 {
			v = w.Info.Version
		}
		ups = append(ups, update{
			id: w.UpdateID, kind: w.Info.Kind, result: w.Info.Result,
			start: w.Info.StartTime, end: w.Info.EndTime, version: v,
			head: verification.CommitSHA(w.Info.Environment.GitHead), changes: w.Info.ResourceChanges,
		})
	}
	return outcome{updates: ups}
}

// netError describes a transport error without the request URL's query
// and, to be safe, without the token.
func netError(err error, token string) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	// Masked before the cut, so that the cut cannot leave a token's start.
	return truncate(redact.NewValues(token).Text(err.Error()), 200)
}

// retryAfter parses a Retry-After header: seconds or an HTTP date.
func retryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if n, err := strconv.ParseInt(h, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return min(time.Duration(n)*time.Second, maxRetryAfter)
	}
	if t, err := http.ParseTime(h); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, maxRetryAfter)
		}
	}
	return 0
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
