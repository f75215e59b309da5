// Package webhook receives git push notifications so a pushed commit deploys in
// seconds instead of at the next poll: GitHub `push` events, authenticated by
// their HMAC-SHA256 signature (checked before anything else is spent on the
// request, rate-limit budget included), refused when a delivery ID or a
// signed payload already accepted comes again (a replay, under its own
// delivery ID or a new one: the ID is not signed), rate-limited,
// size-capped, bounded in concurrency and in the time a body may take, and
// served with read, write and idle timeouts (NewServer). A request without a
// well-formed signature header, or declaring a body over the cap, is refused
// before its body is read.
//
// Errors are answered with internal/httperror: a reason, the receiver's own
// words, and for a failure on its side a request ID naming the log line that
// holds the detail.
//
// It imports the standard library, golang.org/x/time/rate, logr and
// internal/httperror.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"

	"github.com/stackflow-io/stackflow/internal/httperror"
)

// DefaultMaxBody caps request bodies (GitHub's own limit for payloads is 25 MB;
// push payloads of a few commits are far smaller).
const DefaultMaxBody = 1 << 20

// Defaults of the concurrency bound.
const (
	// DefaultMaxConcurrent deliveries are read and handled at once: at most
	// that many bodies (of at most MaxBody each) are in memory.
	DefaultMaxConcurrent = 16
	// DefaultBodyTimeout bounds the reading of a body once a delivery has
	// its place: GitHub sends a payload in one go, so only a client holding
	// a place on purpose takes longer.
	DefaultBodyTimeout = 5 * time.Second
)

// Reasons of the receiver's error answers, besides httperror's.
const (
	// SignatureMissing: no X-Hub-Signature-256 header, or not
	// sha256=<64 hex digits> (a webhook configured without a secret sends
	// none).
	SignatureMissing httperror.Reason = "SignatureMissing"
	// SignatureInvalid: the signature does not match the payload and the
	// secret.
	SignatureInvalid httperror.Reason = "SignatureInvalid"
	// DeliveryIDInvalid: X-GitHub-Delivery is missing or too long.
	DeliveryIDInvalid httperror.Reason = "DeliveryIDInvalid"
	// Replayed: the delivery, or its payload, was already accepted.
	Replayed httperror.Reason = "Replayed"
	// NotABranchPush: a push event that is not a push to a branch.
	NotABranchPush httperror.Reason = "NotABranchPush"
	// PushNotRecorded: the push could not be recorded on its Stacks.
	PushNotRecorded httperror.Reason = "PushNotRecorded"
	// Busy: every place is taken and as many deliveries wait.
	Busy httperror.Reason = "Busy"
	// BodyTimeout: the payload did not arrive within BodyTimeout.
	BodyTimeout httperror.Reason = "BodyTimeout"
)

// signatureHeader is the header GitHub signs deliveries with.
const signatureHeader = "X-Hub-Signature-256"

// Push is what a push event says: the repository (in every URL form GitHub
// gives) and the branch.
type Push struct {
	RepoURLs []string
	Branch   string
}

// GitHub handles POSTs of GitHub webhook deliveries.
type GitHub struct {
	// Secret is the webhook secret; requests must be signed with it. An empty
	// secret refuses every request.
	Secret []byte
	// Limiter bounds accepted deliveries; nil means no limit.
	Limiter *rate.Limiter
	// MaxBody caps the request body; default DefaultMaxBody. A request
	// declaring a longer one (Content-Length) is refused before it is read.
	MaxBody int64
	// MaxConcurrent bounds the deliveries whose body is being read or that
	// are being handled; default DefaultMaxConcurrent. As many more wait for
	// a place, each for at most BodyTimeout and a second (the time a slow
	// client may hold a place, and the moment its refusal takes), then 503;
	// past those, a delivery is answered 503 with Retry-After at once.
	MaxConcurrent int
	// BodyTimeout bounds the reading of a body once its delivery has a
	// place (408 after it); default DefaultBodyTimeout. So a slow client
	// holds a place for at most that long, and a delivery waiting behind
	// it gets one within that time.
	BodyTimeout time.Duration
	// OnPush is called for each verified push to a branch; an error answers
	// 503, so GitHub shows the delivery as failed and it can be redelivered.
	// The error is logged, not sent.
	OnPush func(Push) error
	// Deliveries remembers accepted deliveries by ID (X-GitHub-Delivery, one
	// per event, kept by redeliveries) and by the digest of their signed
	// payload, to refuse replays; nil remembers nothing.
	Deliveries *Deliveries
	// Log receives the detail of failures answered 5xx, under the request
	// ID of the answer; the zero Logger drops it.
	Log logr.Logger

	once    sync.Once
	places  chan struct{} // a token per delivery being read or handled
	waiting atomic.Int64  // deliveries waiting for a place
}

// ServeHTTP verifies and dispatches one delivery. The order matters: what
// the headers alone can refuse (method, signature header, declared size) is
// refused before the body is read; the body is read only with a place
// (MaxConcurrent) and within BodyTimeout; the signature is checked next, so
// unsigned requests spend neither the rate limit of real deliveries nor the
// memory of delivery IDs.
func (g *GitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		refuseUnread(w, http.StatusMethodNotAllowed, httperror.MethodNotAllowed, "POST only")
		return
	}
	sig, ok := signature(r.Header)
	if !ok {
		refuseUnread(w, http.StatusUnauthorized, SignatureMissing, "missing or malformed "+signatureHeader+": expected sha256=<64 hexadecimal digits>; set the webhook's secret")
		return
	}
	if len(g.Secret) == 0 {
		refuseUnread(w, http.StatusUnauthorized, SignatureInvalid, "invalid signature")
		return
	}
	max := g.MaxBody
	if max <= 0 {
		max = DefaultMaxBody
	}
	if r.ContentLength > max {
		refuseUnread(w, http.StatusRequestEntityTooLarge, httperror.RequestTooLarge, "payload over "+strconv.FormatInt(max, 10)+" bytes")
		return
	}
	release, ok := g.acquire(r)
	if !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int((g.bodyTimeout()+time.Second-1)/time.Second)))
		refuseUnread(w, http.StatusServiceUnavailable, Busy, "too many deliveries in progress; redeliver later")
		return
	}
	defer release()
	// A deadline of this request's own, shorter than the server's: the
	// place is held only while the body arrives at the pace of a sender.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(g.bodyTimeout()))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var tooBig *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &tooBig):
			refuseUnread(w, http.StatusRequestEntityTooLarge, httperror.RequestTooLarge, "payload over "+strconv.FormatInt(max, 10)+" bytes")
		case errors.As(err, &ne) && ne.Timeout():
			refuseUnread(w, http.StatusRequestTimeout, BodyTimeout, "the payload did not arrive within "+g.bodyTimeout().String())
		default:
			refuseUnread(w, http.StatusBadRequest, httperror.BadRequest, "cannot read the payload")
		}
		return
	}
	if !g.verify(body, sig) {
		httperror.Write(w, http.StatusUnauthorized, SignatureInvalid, "invalid signature")
		return
	}
	id := r.Header.Get("X-GitHub-Delivery")
	sum := sha256.Sum256(body) // the signed payload's digest
	digest := hex.EncodeToString(sum[:])
	if g.Deliveries != nil {
		if id == "" || len(id) > maxDeliveryID {
			httperror.Write(w, http.StatusBadRequest, DeliveryIDInvalid, "missing or malformed X-GitHub-Delivery")
			return
		}
		// The delivery ID is not signed: a captured payload is refused
		// under any ID.
		if ok, replayed := g.Deliveries.reserve(id, digest); !ok {
			httperror.Write(w, http.StatusConflict, Replayed, replayed)
			return
		}
	}
	accepted := false
	defer func() {
		if g.Deliveries != nil && !accepted {
			g.Deliveries.release(id, digest) // a failed delivery may come again
		}
	}()
	if g.Limiter != nil && !g.Limiter.Allow() {
		w.Header().Set("Retry-After", "1")
		httperror.Write(w, http.StatusTooManyRequests, httperror.TooManyRequests, "too many deliveries")
		return
	}
	switch r.Header.Get("X-GitHub-Event") {
	case "ping":
		accepted = true
		w.WriteHeader(http.StatusOK)
		return
	case "push":
	default:
		accepted = true
		w.WriteHeader(http.StatusNoContent) // signed, but not an event we act on
		return
	}
	push, ok := parsePush(body)
	if !ok {
		httperror.Write(w, http.StatusUnprocessableEntity, NotABranchPush, "not a push to a branch")
		return
	}
	if g.OnPush != nil {
		if err := g.OnPush(push); err != nil {
			httperror.Fail(w, r, g.Log, http.StatusServiceUnavailable, PushNotRecorded, "the push could not be recorded; redeliver it", err)
			return
		}
	}
	accepted = true
	w.WriteHeader(http.StatusAccepted)
}

// refuseUnread answers a request whose body was not (all) read, closing the
// connection: otherwise the server would first try to read what is left of
// the body to reuse the connection, and a client that never sends it would
// get its answer only at the server's read timeout.
func refuseUnread(w http.ResponseWriter, code int, reason httperror.Reason, msg string) {
	w.Header().Set("Connection", "close")
	httperror.Write(w, code, reason, msg)
}

// signature returns the one X-Hub-Signature-256 value when it has the shape
// sha256=<64 hex digits>.
func signature(h http.Header) (string, bool) {
	vs := h.Values(signatureHeader)
	if len(vs) != 1 {
		return "", false
	}
	hexsum, ok := strings.CutPrefix(vs[0], "sha256=")
	if !ok || len(hexsum) != 2*sha256.Size {
		return "", false
	}
	if _, err := hex.DecodeString(hexsum); err != nil {
		return "", false
	}
	return vs[0], true
}

// acquire takes a place for r, waiting at most BodyTimeout and a second
// behind at most MaxConcurrent others; false when there is none.
func (g *GitHub) acquire(r *http.Request) (release func(), ok bool) {
	g.once.Do(func() {
		n := g.MaxConcurrent
		if n <= 0 {
			n = DefaultMaxConcurrent
		}
		g.places = make(chan struct{}, n)
	})
	release = func() { <-g.places }
	select {
	case g.places <- struct{}{}:
		return release, true
	default:
	}
	if g.waiting.Add(1) > int64(cap(g.places)) {
		g.waiting.Add(-1)
		return nil, false
	}
	defer g.waiting.Add(-1)
	t := time.NewTimer(g.bodyTimeout() + time.Second)
	defer t.Stop()
	select {
	case g.places <- struct{}{}:
		return release, true
	case <-t.C:
	case <-r.Context().Done():
	}
	return nil, false
}

func (g *GitHub) bodyTimeout() time.Duration {
	if g.BodyTimeout > 0 {
		return g.BodyTimeout
	}
	return DefaultBodyTimeout
}

// verify checks the "sha256=<hex>" HMAC of body in constant time.
func (g *GitHub) verify(body []byte, header string) bool {
	if len(g.Secret) == 0 {
		return false
	}
	sig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return false
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, g.Secret)
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}

// Sign returns the X-Hub-Signature-256 value for body (for tests and
// senders).
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

func parsePush(body []byte) (Push, bool) {
	var p struct {
		Ref        string `json:"ref"`
		Repository struct {
			CloneURL string `json:"clone_url"`
			SSHURL   string `json:"ssh_url"`
			GitURL   string `json:"git_url"`
			HTMLURL  string `json:"html_url"`
		} `json:"repository"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return Push{}, false
	}
	branch, ok := strings.CutPrefix(p.Ref, "refs/heads/")
	if !ok || branch == "" {
		return Push{}, false
	}
	var urls []string
	for _, u := range []string{p.Repository.CloneURL, p.Repository.SSHURL, p.Repository.GitURL, p.Repository.HTMLURL} {
		if u != "" {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		return Push{}, false
	}
	return Push{RepoURLs: urls, Branch: branch}, true
}
