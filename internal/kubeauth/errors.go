package kubeauth

import (
	"context"
	"errors"
	"net/http"

	"github.com/stackflow-io/stackflow/internal/redact"
)

// HTTPError is implemented by every error this package returns from Check,
// Authenticate, AuthorizeStack and AuthorizePath (an internal/httperror
// Answerer): Error is the detail for the server's log, Message what an answer
// may say.
type HTTPError interface {
	error
	// HTTPStatus is the status code the error means: 401, 403 or 503.
	HTTPStatus() int
	// Reason is the matching PascalCase constant of the analysis service's
	// error body: Unauthorized, Forbidden or ServiceUnavailable.
	Reason() string
	// Message is what the answer may tell the caller: for 401 and 403 the
	// error itself (it names only the caller's own identity and what to
	// grant), for 503 a fixed sentence: the API server's text names the
	// API server and the service's own identity, which an unauthenticated
	// caller must not learn.
	Message() string
}

// StatusCode returns the HTTP status err means: that of the HTTPError in its
// chain, 499 when the caller's context ended first (context.Canceled),
// 504 on context.DeadlineExceeded, otherwise 500.
func StatusCode(err error) int {
	var h HTTPError
	switch {
	case err == nil:
		return http.StatusOK
	case errors.As(err, &h):
		return h.HTTPStatus()
	case errors.Is(err, context.Canceled):
		return 499
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// UnauthenticatedKind says why a request is unauthenticated.
type UnauthenticatedKind string

const (
	// Missing: no Authorization header, or an empty bearer token.
	Missing UnauthenticatedKind = "Missing"
	// Malformed: the Authorization header is not `Bearer <token>`.
	Malformed UnauthenticatedKind = "Malformed"
	// Rejected: the TokenReview did not authenticate the token (invalid,
	// expired, for another audience, or its ServiceAccount is gone).
	Rejected UnauthenticatedKind = "Rejected"
)

// UnauthenticatedError means 401: the caller is not known. Its message never
// holds the token or the Authorization header.
type UnauthenticatedError struct {
	Kind UnauthenticatedKind
	// Detail is the TokenReview's status.error for Rejected (with any
	// occurrence of the token removed), otherwise empty.
	Detail string
	msg    string
}

func (e *UnauthenticatedError) Error() string   { return e.msg }
func (e *UnauthenticatedError) HTTPStatus() int { return http.StatusUnauthorized }
func (e *UnauthenticatedError) Reason() string  { return "Unauthorized" }
func (e *UnauthenticatedError) Message() string { return e.msg }

// Challenge is the WWW-Authenticate header value to send with the 401
// (RFC 6750).
func (e *UnauthenticatedError) Challenge() string {
	if e.Kind == Missing {
		return `Bearer realm="stackflow-analysis"`
	}
	return `Bearer realm="stackflow-analysis", error="invalid_token"`
}

// ForbiddenError means 403: the SubjectAccessReview did not allow the user.
// Its message names the user and the permission to grant.
type ForbiddenError struct {
	User User
	// Resource is set for a Stack check: group pulumi.com, resource stacks.
	Namespace, Name string
	// Path is set for a non-resource URL check.
	Path string
	// SARReason is the SubjectAccessReview's status.reason (often empty
	// under RBAC).
	SARReason string
	msg       string
}

func (e *ForbiddenError) Error() string   { return e.msg }
func (e *ForbiddenError) HTTPStatus() int { return http.StatusForbidden }
func (e *ForbiddenError) Reason() string  { return "Forbidden" }
func (e *ForbiddenError) Message() string { return e.msg }

// UnavailableError means 503: no answer came from the API server (it could
// not be reached, timed out, or refused the review itself — the analysis
// service's own ServiceAccount needs create on tokenreviews and
// subjectaccessreviews, e.g. the ClusterRole system:auth-delegator). It is
// never cached: the next request asks again.
//
// Error holds client-go's text (the API server's URL, the service's own
// user), the caller's token masked: it is for the server's log. Message is
// the fixed sentence an answer says.
type UnavailableError struct {
	// Review is "TokenReview" or "SubjectAccessReview".
	Review string
	msg    string
	err    error
}

func (e *UnavailableError) Error() string   { return e.msg }
func (e *UnavailableError) HTTPStatus() int { return http.StatusServiceUnavailable }
func (e *UnavailableError) Reason() string  { return "ServiceUnavailable" }

// Message says which review found no answer, and nothing of the API
// server's text.
func (e *UnavailableError) Message() string {
	what := "authenticate"
	if e.Review == "SubjectAccessReview" {
		what = "authorise"
	}
	return "cannot " + what + " the caller now: the Kubernetes API server did not answer the " + e.Review + "; retry later"
}

// Unwrap returns the client-go error, so apierrors.IsForbidden and
// errors.Is(err, context.DeadlineExceeded) work. Its own text is the API
// server's; Error() is the one to log, Message() the one to send.
func (e *UnavailableError) Unwrap() error { return e.err }

// redactToken masks the caller's token in an API server's message
// (internal/redact).
func redactToken(s, token string) string {
	return redact.NewValues(token).Text(s)
}
