package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// AgentTokens remembers, per Workspace UID, the bearer token of the
// Workspace's agent, read from (or written to) its token Secret, so that
// neither the Workspace controller's periodic looks nor an Update's
// reconciles read the Secret again: Secrets are read from the API server,
// uncached, and those reads were most of a fleet's steady API requests and a
// fifth of the operator's latency per Update. A token never changes for a
// UID (the Secret's name carries it). A token is forgotten when an agent
// refuses it, when the Workspace's runtime reports it failing (its Secret
// may be gone: it is then recreated) and with the Workspace; a restarted
// operator reads the Secrets again. The Workspace and Update controllers
// share one; nil remembers nothing.
type AgentTokens struct {
	m sync.Map // types.UID → string
}

func (t *AgentTokens) get(uid types.UID) (string, bool) {
	if t == nil {
		return "", false
	}
	v, ok := t.m.Load(uid)
	if !ok {
		return "", false
	}
	return v.(string), true
}

func (t *AgentTokens) put(uid types.UID, token string) {
	if t != nil {
		t.m.Store(uid, token)
	}
}

func (t *AgentTokens) forget(uid types.UID) {
	if t != nil {
		t.m.Delete(uid)
	}
}
