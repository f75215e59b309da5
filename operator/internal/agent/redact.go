package agent

import (
	"sort"
	"strings"
	"sync"
)

// redactor replaces known secret values (secret config values, credentials from
// the environment) with "[secret]" in everything the agent reports or logs: the
// engine masks secrets it knows, but a provider's error message may echo an
// input verbatim.
type redactor struct {
	mu      sync.RWMutex
	secrets []string
}

// minSecretLen avoids redacting short values such as "1" or "yes" everywhere.
const minSecretLen = 4

func (r *redactor) add(values ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range values {
		if len(v) < minSecretLen {
			continue
		}
		r.secrets = append(r.secrets, v)
	}
	// Longest first, so a secret containing another is replaced whole.
	sort.Slice(r.secrets, func(i, j int) bool { return len(r.secrets[i]) > len(r.secrets[j]) })
}

func (r *redactor) redact(s string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, v := range r.secrets {
		s = strings.ReplaceAll(s, v, "[secret]")
	}
	return s
}
