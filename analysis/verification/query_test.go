package verification

import (
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseQuery(t *testing.T) {
	for _, tt := range []struct {
		raw  string
		want Query
		err  string
	}{
		{raw: "commit=ABCDEF1", want: Query{Commit: "abcdef1", Operation: OperationUp}},
		{raw: "commit=" + shaA + "&operation=preview&within=15m&wait=20s", want: Query{Commit: shaA, Operation: OperationPreview, Within: 15 * time.Minute, Wait: 20 * time.Second}},
		{raw: "commit=abcdef1&notFoundAfter=2026-12-01T12:05:00Z", want: Query{Commit: "abcdef1", Operation: OperationUp, NotFoundAfter: time.Date(2026, 12, 1, 12, 5, 0, 0, time.UTC)}},
		// Another offset and fractional seconds: the same instant, in UTC.
		{raw: "commit=abcdef1&notFoundAfter=2026-12-01T13:05:00.5%2B01:00", want: Query{Commit: "abcdef1", Operation: OperationUp, NotFoundAfter: time.Date(2026, 12, 1, 12, 5, 0, 5e8, time.UTC)}},
		{raw: "commit=abcdef1&notFoundAfter=5m", err: "notFoundAfter \"5m\" is not a time"},
		{raw: "commit=abcdef1&notFoundAfter=2026-12-01", err: "is not a time"},
		{raw: "commit=abcdef1&notFoundAfter=2026-12-01T12:05:00.000000000000000000000Z", err: "is not a time"},
		{raw: "commit=abcdef1&denyOn=delete,replace,delete", want: Query{Commit: "abcdef1", Operation: OperationUp, DenyOn: []string{"delete", "replace"}}},
		{raw: "commit=abcdef1&denyOn=none", want: Query{Commit: "abcdef1", Operation: OperationUp}},
		{raw: "commit=abcdef1&denyOn=", want: Query{Commit: "abcdef1", Operation: OperationUp}},
		{raw: "commit=abcdef1&denyOn=destroy", err: `names "destroy": use a comma-separated list of create, update, delete`},
		{raw: "", err: "commit is required"},
		{raw: "commit=abc", err: "not a commit SHA"},
		{raw: "commit=" + shaA + "0", err: "not a commit SHA"},
		{raw: "commit=zzzzzzz", err: "not a commit SHA"},
		{raw: "commit=abcdef1&operation=destroy", err: "unknown operation"},
		{raw: "commit=abcdef1&within=soon", err: "not a duration"},
		{raw: "commit=abcdef1&within=-1m", err: "must be positive"},
		{raw: "commit=abcdef1&wait=26s", err: "too long"},
		{raw: "comit=abcdef1", err: "unknown query parameter"},
		{raw: "commit=abcdef1&commit=abcdef2", err: "given 2 times"},
	} {
		t.Run(tt.raw, func(t *testing.T) {
			v, _ := url.ParseQuery(tt.raw)
			got, err := ParseQuery(v)
			if tt.err != "" {
				var qe *QueryError
				if err == nil || !errors.As(err, &qe) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestMatches(t *testing.T) {
	for _, tt := range []struct {
		rev, commit string
		want        bool
	}{
		{shaA, shaA[:7], true},
		{strings.ToUpper(shaA), shaA[:7], true},
		{"main@sha1:" + shaA, shaA, true},
		{shaA[:7], shaA, false},
		{shaA, shaB[:7], false},
		{"", shaA[:7], false},
		{shaA, "", false},
	} {
		if got := Matches(tt.rev, tt.commit); got != tt.want {
			t.Errorf("Matches(%q, %q) = %v", tt.rev, tt.commit, got)
		}
	}
}

// FuzzParseQuery: any query string either parses into a query whose commit
// is a valid SHA and whose durations are in range, or fails with a
// QueryError; it never panics.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"commit=abcdef1", "commit=" + shaA + "&operation=preview&within=1h&wait=25s", "comit=x", "commit=%zz", "commit=abcdef1&wait=1e9h", "within=-0s&commit=ABCDEF0", "commit=abcdef1&notFoundAfter=2026-12-01T12:05:00Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, err := ParseQuery(v)
		if err != nil {
			var qe *QueryError
			if !errors.As(err, &qe) {
				t.Fatalf("error of another type: %T %v", err, err)
			}
			if len(err.Error()) > 400 {
				t.Fatalf("error message of %d bytes: inputs must be truncated", len(err.Error()))
			}
			return
		}
		if !IsCommit(q.Commit) || (q.Operation != OperationUp && q.Operation != OperationPreview) || q.Within < 0 || q.Wait < 0 || q.Wait > MaxWait ||
			!q.NotFoundAfter.IsZero() && q.NotFoundAfter.Location() != time.UTC {
			t.Fatalf("accepted an invalid query: %+v", q)
		}
	})
}
