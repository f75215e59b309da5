package workspace

import "github.com/stackflow-io/stackflow/internal/redact"

// Redact masks, in a message shown in a status or an event, URL credentials
// and every secret value given (internal/redact: each whole value and each
// line of a multi-line value such as a private key, longest first, and the
// start of one cut before an ellipsis).
func Redact(msg string, secrets []string) string {
	return redact.NewValues(secrets...).Text(redact.URLCredentials(msg))
}
