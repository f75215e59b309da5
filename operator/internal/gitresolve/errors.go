package gitresolve

import (
	"errors"
	"fmt"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
	"github.com/stackflow-io/stackflow/operator/internal/gitremote"
)

// UnavailableError: the repository or branch does not exist, or access to it
// is refused — retrying will not help until someone changes something. Any
// other error from a listing (a network error, a timeout, a server error) is
// transient.
type UnavailableError struct{ Err error }

func (e *UnavailableError) Error() string { return e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

// IsUnavailable reports a permanent error (UnavailableError).
func IsUnavailable(err error) bool {
	var u *UnavailableError
	return errors.As(err, &u)
}

// RetryError is a transient error with the time the resolver will list the
// repository again.
type RetryError struct {
	Err error
	// After is when to ask again: the backoff's end, or the end of a
	// listing under way.
	After time.Duration
	// Backoff is the wait after this failure (the message says it: unlike
	// After, it does not move while a Stack waits).
	Backoff time.Duration
}

func (e *RetryError) Error() string {
	if e.Backoff <= 0 {
		return e.Err.Error()
	}
	return fmt.Sprintf("%v (retrying the repository every %s)", e.Err, e.Backoff.Round(time.Second))
}
func (e *RetryError) Unwrap() error { return e.Err }

// RetryAfter is when a transient error's repository is listed again.
func RetryAfter(err error) (time.Duration, bool) {
	var r *RetryError
	if errors.As(err, &r) {
		return r.After, true
	}
	return 0, false
}

// classify wraps the errors of a listing that retrying will not fix:
// refused or missing repositories, and credentials that cannot work
// (gitauth.IsPermanent: an unusable key, an SSH host key matching no
// known_hosts entry or none configured, GitHub refusing the App).
func classify(err error) error {
	if err == nil {
		return nil
	}
	if gitauth.IsPermanent(err) || errors.Is(err, gitremote.ErrInvalidURL) || errors.Is(err, gitremote.ErrUnsupportedScheme) {
		return &UnavailableError{Err: err}
	}
	for _, permanent := range []error{transport.ErrRepositoryNotFound, transport.ErrAuthenticationRequired,
		transport.ErrAuthorizationFailed, transport.ErrInvalidAuthMethod, transport.ErrEmptyRemoteRepository} {
		if errors.Is(err, permanent) {
			return &UnavailableError{Err: err}
		}
	}
	return err
}
