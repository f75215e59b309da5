// Package webhook receives git push notifications so a pushed commit deploys in
// seconds instead of at the next poll: GitHub `push` events, authenticated by
// their HMAC-SHA256 signature (checked before anything else is spent on the
// request, rate-limit budget included), refused when a delivery ID or a
// signed payload already accepted comes again (a replay, under its own
// delivery ID or a new one: the ID is not signed), rate-limited,
// size-capped, and served with read, write and idle timeouts (NewServer).
//
// It imports only the standard library and golang.org/x/time/rate.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"golang.org/x/time/rate"
)

// DefaultMaxBody caps request bodies (GitHub's own limit for payloads is 25 MB;
// push payloads of a few commits are far smaller).
const DefaultMaxBody = 1 << 20

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
	// MaxBody caps the request body; default DefaultMaxBody.
	MaxBody int64
	// OnPush is called for each verified push to a branch; an error answers
	// 503, so GitHub shows the delivery as failed and it can be redelivered.
	OnPush func(Push) error
	// Deliveries remembers accepted deliveries by ID (X-GitHub-Delivery, one
	// per event, kept by redeliveries) and by the digest of their signed
	// payload, to refuse replays; nil remembers nothing.
	Deliveries *Deliveries
}

// ServeHTTP verifies and dispatches one delivery. The order matters: the
// signature is checked first, so unsigned requests spend neither the rate
// limit of real deliveries nor the memory of delivery IDs.
func (g *GitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	max := g.MaxBody
	if max <= 0 {
		max = DefaultMaxBody
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, "payload too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "cannot read payload", http.StatusBadRequest)
		return
	}
	if !g.verify(body, r.Header.Get("X-Hub-Signature-256")) {
		http.Error(w, "missing or invalid signature", http.StatusUnauthorized)
		return
	}
	id := r.Header.Get("X-GitHub-Delivery")
	sum := sha256.Sum256(body) // the signed payload's digest
	digest := hex.EncodeToString(sum[:])
	if g.Deliveries != nil {
		if id == "" || len(id) > maxDeliveryID {
			http.Error(w, "missing or malformed X-GitHub-Delivery", http.StatusBadRequest)
			return
		}
		// The delivery ID is not signed: a captured payload is refused
		// under any ID.
		if ok, replayed := g.Deliveries.reserve(id, digest); !ok {
			http.Error(w, replayed, http.StatusConflict)
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
		http.Error(w, "too many deliveries", http.StatusTooManyRequests)
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
		http.Error(w, "not a push to a branch", http.StatusUnprocessableEntity)
		return
	}
	if g.OnPush != nil {
		if err := g.OnPush(push); err != nil {
			http.Error(w, "the push could not be recorded; redeliver it", http.StatusServiceUnavailable)
			return
		}
	}
	accepted = true
	w.WriteHeader(http.StatusAccepted)
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
