package httperror

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/stackflow-io/stackflow/test/framework/logbuf"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-logr/logr"
)

func decode(t *testing.T, rec *httptest.ResponseRecorder) Body {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	var b Body
	if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	if b.Code != rec.Code {
		t.Fatalf("body code %d, status %d", b.Code, rec.Code)
	}
	return b
}

// answer is an Answerer as kubeauth's errors are.
type answer struct {
	code           int
	reason, detail string
}

func (a answer) Error() string   { return a.detail }
func (a answer) HTTPStatus() int { return a.code }
func (a answer) Reason() string  { return a.reason }
func (a answer) Message() string { return "fixed words for " + a.reason }

// status is an error that says only its status.
type status struct {
	code int
	text string
}

func (s status) Error() string   { return s.text }
func (s status) HTTPStatus() int { return s.code }

func TestWrite(t *testing.T) {
	for _, tt := range []struct {
		name, msg, want string
	}{
		{"own words", "commit \"abc\" is not a commit SHA", "commit \"abc\" is not a commit SHA"},
		{"URL credentials masked", "cannot reach https://bob:hunter22@git.example.com/x", "cannot reach https://***@git.example.com/x"},
		{"bounded", strings.Repeat("a", 600), strings.Repeat("a", MaxMessage-len("…")) + "…"},
		{"cut at a rune", strings.Repeat("é", 400), strings.Repeat("é", (MaxMessage-len("…"))/2) + "…"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			Write(rec, http.StatusBadRequest, BadRequest, tt.msg)
			b := decode(t, rec)
			if b.Message != tt.want || b.Reason != BadRequest || b.RequestID != "" || !utf8.ValidString(b.Message) || len(b.Message) > MaxMessage {
				t.Fatalf("body %+v, want message %q", b, tt.want)
			}
		})
	}
}

// TestFailLogsTheDetailOnly: the answer has the fixed message and a request
// ID; the log line has the same ID and the error, URL credentials masked.
func TestFailLogsTheDetailOnly(t *testing.T) {
	var logs logbuf.Buffer
	err := errors.New(`Post "https://stackflow:hunter22@10.96.0.1:443/apis/authentication.k8s.io/v1/tokenreviews": dial tcp 10.96.0.1:443: connect: connection refused`)
	rec := httptest.NewRecorder()
	id := Fail(rec, httptest.NewRequest("GET", "/v1/x", nil), logs.Logger(), http.StatusServiceUnavailable, ServiceUnavailable, "the API server did not answer; retry later", err)
	b := decode(t, rec)
	if b.RequestID != id || len(id) != 16 || rec.Header().Get(RequestIDHeader) != id || b.Message != "the API server did not answer; retry later" {
		t.Fatalf("body %+v, header %q, id %q", b, rec.Header().Get(RequestIDHeader), id)
	}
	if strings.Contains(rec.Body.String(), "10.96.0.1") {
		t.Fatalf("the answer holds the detail: %s", rec.Body)
	}
	l := logs.String()
	if !strings.Contains(l, id) || !strings.Contains(l, "https://***@10.96.0.1:443") || strings.Contains(l, "hunter22") {
		t.Fatalf("log %q: want the ID and the masked error", l)
	}
	if Fail(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), logr.Discard(), 500, InternalError, "x", nil) == id {
		t.Fatal("two failures share a request ID")
	}
}

func TestError(t *testing.T) {
	const detail = `tokenreviews.authentication.k8s.io is forbidden: User "system:serviceaccount:stackflow-system:stackflow-analysis" cannot create resource`
	for _, tt := range []struct {
		name    string
		err     error
		code    int
		reason  Reason
		message string
		logged  bool
	}{
		{"a 401 says its message", answer{401, "Unauthorized", detail}, 401, Unauthorized, "fixed words for Unauthorized", false},
		{"a 503 says its message, logs the error", fmt.Errorf("check: %w", answer{503, "ServiceUnavailable", detail}), 503, ServiceUnavailable, "fixed words for ServiceUnavailable", true},
		{"a 403 that says only its status quotes itself", status{403, "caller bob cannot get stacks.pulumi.com"}, 403, Forbidden, "caller bob cannot get stacks.pulumi.com", false},
		{"a 503 that says only its status does not", status{503, detail}, 503, ServiceUnavailable, "internal error; the server's log has the detail under the request ID", true},
		{"any other error is a 500", errors.New(detail), 500, InternalError, "internal error; the server's log has the detail under the request ID", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs logbuf.Buffer
			rec := httptest.NewRecorder()
			if code := Error(rec, httptest.NewRequest("GET", "/", nil), logs.Logger(), tt.err); code != tt.code {
				t.Fatalf("code %d, want %d", code, tt.code)
			}
			b := decode(t, rec)
			if b.Code != tt.code || b.Reason != tt.reason || b.Message != tt.message || (b.RequestID != "") != tt.logged {
				t.Fatalf("body %+v", b)
			}
			if strings.Contains(rec.Body.String(), "stackflow-analysis") {
				t.Fatalf("the answer holds the detail: %s", rec.Body)
			}
			if got := strings.Contains(logs.String(), "stackflow-analysis"); got != tt.logged {
				t.Fatalf("detail logged: %v, want %v (%q)", got, tt.logged, logs.String())
			}
		})
	}
}
