package kargoe2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// backendUpdate is one operation in the file backend's history.
type backendUpdate struct {
	Kind, Result, Head string
	// Took is the engine's own time, from the record's start and end
	// (whole seconds).
	Took time.Duration
}

// engineTime is the engine's time for the last record of commit in the
// stack's history (0 when none).
func engineTime(t testing.TB, backend, project, stack, commit string) time.Duration {
	var took time.Duration
	for _, u := range backendHistory(t, backend, project, stack) {
		if u.Head == commit {
			took = u.Took
		}
	}
	return took
}

// backendHistory reads the file backend's history of a Pulumi stack of the
// project, oldest first (each file is named <stack>-<unix nanos>).
func backendHistory(t testing.TB, backend, project, stack string) []backendUpdate {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(strings.TrimPrefix(backend, "file://"), ".pulumi", "history", project, stack, "*.history.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out []backendUpdate
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var h struct {
			Kind        string            `json:"kind"`
			Result      string            `json:"result"`
			Environment map[string]string `json:"environment"`
			StartTime   int64             `json:"startTime"`
			EndTime     int64             `json:"endTime"`
		}
		if err := json.Unmarshal(b, &h); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, backendUpdate{Kind: h.Kind, Result: h.Result, Head: h.Environment["git.head"],
			Took: time.Duration(h.EndTime-h.StartTime) * time.Second})
	}
	return out
}

// appliedOnce checks that the backend applied commit to the stack in exactly
// one succeeded update.
func appliedOnce(t testing.TB, backend, project, stack, commit string) {
	t.Helper()
	n := 0
	var all []string
	for _, u := range backendHistory(t, backend, project, stack) {
		all = append(all, fmt.Sprintf("%s %s %.7s", u.Kind, u.Result, u.Head))
		if u.Kind == "update" && u.Result == "succeeded" && u.Head == commit {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the backend applied %.7s to stack %s %d times, want once; history: %v", commit, stack, n, all)
	}
}
