package agentclient

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"time"
)

// TokenSource gives the bearer token of the next call.
type TokenSource interface {
	Token() (string, error)
}

// FileTokenRefresh is how long FileToken serves a token before reading the
// file again. The kubelet rewrites a projected ServiceAccount token when 80%
// of its lifetime has passed (at least 10 minutes), so a minute is far inside
// every token's remaining validity.
const FileTokenRefresh = time.Minute

// FileToken reads a token from a file, such as a projected ServiceAccount
// token volume, again at most every Refresh (default FileTokenRefresh). A
// read that fails after a successful one keeps the last token until the file
// is readable again; errors name the file, never its content.
type FileToken struct {
	Path string
	// Refresh is how long a read token is served; 0 means FileTokenRefresh.
	Refresh time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time

	mu     sync.Mutex
	token  string
	readAt time.Time
}

// Token returns the file's token, read again when Refresh has passed.
func (f *FileToken) Token() (string, error) {
	now := time.Now
	if f.Now != nil {
		now = f.Now
	}
	refresh := f.Refresh
	if refresh <= 0 {
		refresh = FileTokenRefresh
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t := now()
	if !needsRead(f.token != "", f.readAt, t, refresh) {
		return f.token, nil
	}
	b, err := os.ReadFile(f.Path)
	if err == nil && len(bytes.TrimSpace(b)) == 0 {
		err = fmt.Errorf("agent token file %s is empty", f.Path)
	}
	if err != nil {
		if f.token != "" {
			return f.token, nil // the last token is still valid for a while
		}
		return "", fmt.Errorf("read the agent token: %w", err)
	}
	f.token, f.readAt = string(bytes.TrimSpace(b)), t
	return f.token, nil
}

// needsRead decides whether a token read at readAt is read again at now.
func needsRead(have bool, readAt, now time.Time, refresh time.Duration) bool {
	return !have || now.Sub(readAt) >= refresh || now.Before(readAt)
}
