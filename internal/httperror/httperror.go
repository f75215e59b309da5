package httperror

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/go-logr/logr"

	"github.com/stackflow-io/stackflow/internal/redact"
)

// Reason says why a request failed: a PascalCase constant, stable for clients
// to match on. Servers define their own besides these.
type Reason string

// Reasons every server may answer.
const (
	BadRequest         Reason = "BadRequest"
	Unauthorized       Reason = "Unauthorized"
	Forbidden          Reason = "Forbidden"
	NotFound           Reason = "NotFound"
	MethodNotAllowed   Reason = "MethodNotAllowed"
	RequestTooLarge    Reason = "RequestTooLarge"
	TooManyRequests    Reason = "TooManyRequests"
	ServiceUnavailable Reason = "ServiceUnavailable"
	InternalError      Reason = "InternalError"
)

// Body is the JSON body of every error answer.
type Body struct {
	// Code is the HTTP status code.
	Code int `json:"code"`
	// Reason is a PascalCase constant saying why.
	Reason Reason `json:"reason"`
	// Message says what is wrong and, when the caller can, how to fix it:
	// the server's own words, at most MaxMessage bytes.
	Message string `json:"message"`
	// RequestID, set on a failure on the server's side, is in the server's
	// log line holding the detail (also the X-Request-Id header).
	RequestID string `json:"requestID,omitempty"`
}

// MaxMessage bounds a message, in bytes; a longer one is cut and ends
// with "…".
const MaxMessage = 512

// RequestIDHeader carries the request ID of a logged failure.
const RequestIDHeader = "X-Request-Id"

// Write answers code with reason and message: a refusal the caller can act on
// (a bad request, missing credentials, a denied access), in the server's own
// words. The message is bounded and URL credentials in it masked all the same.
// Nothing is logged.
func Write(w http.ResponseWriter, code int, reason Reason, message string) {
	write(w, Body{Code: code, Reason: reason, Message: message})
}

// Fail answers a failure whose cause the caller must not see (a dependency
// that failed, an internal error): err, with URL credentials masked, is
// logged under a new request ID, and the answer is code, reason, the fixed
// message and that ID. It returns the ID.
func Fail(w http.ResponseWriter, r *http.Request, log logr.Logger, code int, reason Reason, message string, err error) string {
	id := newRequestID()
	if err == nil {
		err = errors.New("no error given")
	}
	log.Error(errors.New(redact.URLCredentials(err.Error())), "Request failed",
		"requestID", id, "method", r.Method, "path", redact.URLCredentials(r.URL.Path), "code", code, "reason", reason)
	w.Header().Set(RequestIDHeader, id)
	write(w, Body{Code: code, Reason: reason, Message: message, RequestID: id})
	return id
}

// Answerer is an error that says its own answer: kubeauth's errors are.
// Message is what the caller may read; Error is for the log.
type Answerer interface {
	StatusCoder
	Reason() string
	Message() string
}

// StatusCoder is an error that says its HTTP status.
type StatusCoder interface {
	error
	HTTPStatus() int
}

// Status is the status Error answers err with: the HTTPStatus of the first
// StatusCoder in its chain, otherwise 500.
func Status(err error) int {
	var sc StatusCoder
	if errors.As(err, &sc) {
		return sc.HTTPStatus()
	}
	return http.StatusInternalServerError
}

// Error answers err and returns the status. An Answerer in its chain is
// answered with its status, reason and message; an error that says only its
// status (a StatusCoder) with that status, the reason of the status and, for
// a 4xx, its own text (a refusal it means the caller to read). Any other
// error is 500 InternalError. Every 5xx is answered through Fail: its error
// is logged, and an error that is not an Answerer is answered in fixed words.
func Error(w http.ResponseWriter, r *http.Request, log logr.Logger, err error) int {
	var a Answerer
	if errors.As(err, &a) {
		code := a.HTTPStatus()
		if code >= 500 {
			Fail(w, r, log, code, Reason(a.Reason()), a.Message(), err)
		} else {
			Write(w, code, Reason(a.Reason()), a.Message())
		}
		return code
	}
	code := Status(err)
	if code < 500 {
		Write(w, code, reasonOf(code), err.Error())
		return code
	}
	Fail(w, r, log, code, reasonOf(code), "internal error; the server's log has the detail under the request ID", err)
	return code
}

// reasonOf is the Reason of a status an error gave without one.
func reasonOf(code int) Reason {
	switch code {
	case http.StatusBadRequest:
		return BadRequest
	case http.StatusUnauthorized:
		return Unauthorized
	case http.StatusForbidden:
		return Forbidden
	case http.StatusNotFound:
		return NotFound
	case http.StatusMethodNotAllowed:
		return MethodNotAllowed
	case http.StatusRequestEntityTooLarge:
		return RequestTooLarge
	case http.StatusTooManyRequests:
		return TooManyRequests
	case http.StatusServiceUnavailable:
		return ServiceUnavailable
	}
	if code < 500 {
		return BadRequest
	}
	return InternalError
}

func write(w http.ResponseWriter, b Body) {
	b.Message = bound(redact.URLCredentials(b.Message))
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(b.Code)
	_ = json.NewEncoder(w).Encode(b)
}

// bound cuts s to MaxMessage bytes at a rune boundary.
func bound(s string) string {
	if len(s) <= MaxMessage {
		return s
	}
	const mark = "…"
	cut := MaxMessage - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.ToValidUTF8(s[:cut], "") + mark
}

// newRequestID is 16 random hexadecimal characters.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
