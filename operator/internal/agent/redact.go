package agent

import (
	"encoding/json"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/stackflow-io/stackflow/internal/redact"
)

// redactor replaces known secret values (secret config values, credentials from
// the environment, secret outputs) with "[secret]" in everything the agent
// reports or logs: the engine masks secrets it knows, but a provider's error
// message may echo an input verbatim.
//
// Its size is bounded: permanent values (the credentials and secret
// environment the agent started with, which stay in its environment) are
// added once; the values of a scope (a stack's secret configuration, its
// secret outputs, the credentials of the last Checkout, the last GitHub App
// installation token) are replaced by each new set for that scope, and only
// the current and the previous set of each scope are kept — the previous one
// because a run that started before the replacement may still print it.
// Values are deduped, so repeating the same SelectStack never grows it.
type redactor struct {
	mu        sync.RWMutex
	permanent map[string]struct{}
	scopes    map[string]*scopeSecrets
	// values is the union of all of the above, prepared for masking.
	values redact.Values
}

// scopeSecrets are the current and previous value sets of a scope.
type scopeSecrets struct {
	current, previous map[string]struct{}
}

func newRedactor() *redactor {
	return &redactor{permanent: map[string]struct{}{}, scopes: map[string]*scopeSecrets{}}
}

// add records values redacted for the agent's lifetime.
func (r *redactor) add(values ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	for _, v := range values {
		if _, ok := r.permanent[v]; ok || len(v) < redact.MinLength {
			continue
		}
		r.permanent[v] = struct{}{}
		changed = true
	}
	if changed {
		r.rebuild()
	}
}

// replace makes values the current set of scope; the set they replace is kept
// as the previous one, the one before it dropped.
func (r *redactor) replace(scope string, values ...string) {
	next := map[string]struct{}{}
	for _, v := range values {
		if len(v) >= redact.MinLength {
			next[v] = struct{}{}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sc, ok := r.scopes[scope]
	if !ok {
		sc = &scopeSecrets{}
		r.scopes[scope] = sc
	}
	if sameSet(sc.current, next) {
		return // a repeated SelectStack: nothing to shift
	}
	sc.previous, sc.current = sc.current, next
	r.rebuild()
}

func sameSet(a, b map[string]struct{}) bool {
	if len(a) != len(b) {
		return false
	}
	for v := range a {
		if _, ok := b[v]; !ok {
			return false
		}
	}
	return true
}

// rebuild recomputes the redaction list; r.mu must be held for writing.
func (r *redactor) rebuild() {
	all := map[string]struct{}{}
	for v := range r.permanent {
		all[v] = struct{}{}
	}
	for _, sc := range r.scopes {
		for v := range sc.current {
			all[v] = struct{}{}
		}
		for v := range sc.previous {
			all[v] = struct{}{}
		}
	}
	list := make([]string, 0, len(all))
	for v := range all {
		list = append(list, v)
	}
	r.values = redact.NewValues(list...)
}

// size is the number of distinct values redacted.
func (r *redactor) size() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.values.Len()
}

// redact masks every value (internal/redact: whole values, lines of
// multi-line ones, starts cut before an ellipsis by the engine).
func (r *redactor) redact(s string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.values.Text(s)
}

// cutIndex is where to cut s to at most n bytes: n, or before it, on a UTF-8
// boundary and before any secret value that the cut would split and that s
// shows whole (s holds what follows the cut too): no start of such a value
// is left before the cut.
func (r *redactor) cutIndex(s string, n int) int {
	if len(s) <= n {
		return len(s)
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	r.mu.RLock()
	values := r.values.List()
	r.mu.RUnlock()
	for moved := true; moved; {
		moved = false
		for _, v := range values {
			// An occurrence of v in this window, were there one, would
			// start before the cut and end after it.
			from, to := max(0, n-len(v)+1), min(len(s), n+len(v)-1)
			if from >= to {
				continue
			}
			if i := strings.Index(s[from:to], v); i >= 0 {
				n, moved = from+i, true
			}
		}
	}
	return n
}

// redactCut is s cut at cutIndex(s, n), redacted, then mark. A value s shows
// only in part (longer than what s holds past n) has its start, from 8 bytes
// on, masked as the start of a value cut before an ellipsis
// (internal/redact); a start shorter than that stays, as it does where the
// engine cuts a value.
func (r *redactor) redactCut(s string, n int, mark string) string {
	if len(s) <= n {
		return r.redact(s)
	}
	const ellipsis = "…"
	return strings.TrimSuffix(r.redact(s[:r.cutIndex(s, n)]+ellipsis), ellipsis) + mark
}

// summarize is summarize(err) redacted before it is capped, so that the cap
// cannot cut a secret into a prefix that no longer matches.
func (r *redactor) summarize(err error) string {
	return truncateMessage(r.redact(summaryLines(err)))
}

// secretLeaves are the values to redact for a secret output of any JSON type:
// a string itself; a number or boolean as printed in JSON; for an object or a
// list, its JSON text and each leaf, since a provider may echo any of them.
func secretLeaves(v any) []string {
	switch t := v.(type) {
	case nil:
		return nil
	case string:
		return []string{t}
	case map[string]any:
		out := []string{jsonText(t)}
		for _, e := range t {
			out = append(out, secretLeaves(e)...)
		}
		return out
	case []any:
		out := []string{jsonText(t)}
		for _, e := range t {
			out = append(out, secretLeaves(e)...)
		}
		return out
	default:
		return []string{jsonText(t)}
	}
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

// Redaction scopes.
func configScope(stack string) string  { return "config/" + stack }
func outputsScope(stack string) string { return "outputs/" + stack }

const (
	// checkoutCredentialsScope: the git credentials of the last Checkout
	// that carried some.
	checkoutCredentialsScope = "checkout-credentials"
	// appTokenScope: the GitHub App installation token of the last fetch
	// that used one (a new one about every hour).
	appTokenScope = "github-app-token"
)
