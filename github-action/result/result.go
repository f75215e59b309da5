// Package result holds what one preview of one stack found, the shared
// vocabulary of the GitHub Action's parts: the previews (program and
// manifests mode) produce Results, the report renders them (PR comment,
// job summary, outputs) and the GitHub client posts them (comment sections,
// commit statuses).
//
// It imports nothing but the standard library.
package result

// Status is how a stack's preview ended.
type Status string

const (
	// Succeeded: the preview ran (whether or not it found changes).
	Succeeded Status = "succeeded"
	// Failed: the preview errored (the action then exits non-zero).
	Failed Status = "failed"
	// Skipped: not previewed, and Notes say why (a Stack removed from the
	// tree, a fluxSource, a programRef Program not in the tree, no program
	// source). Its commit status is failure unless the workflow sets
	// not-previewed: success.
	Skipped Status = "skipped"
)

// Result is one stack's preview.
type Result struct {
	// Key identifies the stack's section in the PR comment and its commit
	// status: "<project>/<stack>" in program mode,
	// "<namespace>/<name>" of the Stack manifest in manifests mode. Stable
	// across runs and jobs.
	Key string `json:"key"`
	// Project and Stack are the Pulumi project and stack names.
	Project string `json:"project"`
	Stack   string `json:"stack"`
	// Source says what was previewed, for a person: "program in infra/" or
	// "Stack dev/web (stacks/dev.yaml): commit 1a2b3c4 → 5d6e7f8".
	Source string `json:"source"`
	Status Status `json:"status"`
	// Changes counts the resource operations the preview proposes.
	Changes Changes `json:"changes"`
	// Resources lists the resources that would change (not the unchanged
	// ones), in the engine's order.
	Resources []Resource `json:"resources,omitempty"`
	// Error is the preview's error message (Failed), with secrets masked.
	Error string `json:"error,omitempty"`
	// Output is the engine's preview output (may hold ANSI escapes;
	// renderers strip and escape it), with secrets masked.
	Output string `json:"-"`
	// Notes are facts a reviewer must know: unresolved inputs (secretsRef,
	// Secret envRefs, Programs not in the tree), a Stack in preview mode,
	// a Stack removed from the tree.
	Notes []string `json:"notes,omitempty"`
}

// Changes counts resource operations.
type Changes struct {
	Create  int `json:"create"`
	Update  int `json:"update"`
	Delete  int `json:"delete"`
	Replace int `json:"replace"`
	Same    int `json:"same"`
}

// Any reports whether anything would change.
func (c Changes) Any() bool { return c.Create+c.Update+c.Delete+c.Replace > 0 }

// Resource is one resource that would change.
type Resource struct {
	// Op is the operation: create, update, delete, replace (and the
	// engine's other non-same operations: create-replacement,
	// delete-replaced, read, import…).
	Op   string `json:"op"`
	Type string `json:"type"`
	Name string `json:"name"`
	URN  string `json:"urn"`
}

// HasChanges reports whether any result would change something.
func HasChanges(rs []Result) bool {
	for _, r := range rs {
		if r.Changes.Any() {
			return true
		}
	}
	return false
}
