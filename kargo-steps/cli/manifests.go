package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/stackflow-io/stackflow/kargo-steps/manifest"
)

// SetCommitOutput is what set-commit writes to $KARGO_OUTPUT (JSON).
type SetCommitOutput struct {
	File          string `json:"file"`
	Document      int    `json:"document"`
	Namespace     string `json:"namespace,omitempty"`
	Stack         string `json:"stack"`
	Commit        string `json:"commit"`
	OldCommit     string `json:"oldCommit,omitempty"`
	BranchRemoved bool   `json:"branchRemoved"`
	Changed       bool   `json:"changed"`
}

func setCommit(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("set-commit", "set-commit --dir DIR --stack NAME [--namespace NS] --commit SHA", stderr)
	var dir, commit string
	var t manifest.Target
	fs.StringVar(&dir, "dir", ".", "directory holding the manifests (searched recursively, .yaml and .yml)")
	fs.StringVar(&t.Name, "stack", "", "metadata.name of the Stack (required)")
	fs.StringVar(&t.Namespace, "namespace", "", "metadata.namespace of the Stack, when the name alone is ambiguous")
	fs.StringVar(&commit, "commit", "", "the commit to pin: a full 40-character hexadecimal SHA (required)")
	if ok, code := parse(fs, args); !ok {
		return code
	}
	if t.Name == "" || commit == "" {
		fmt.Fprintln(stderr, "error: --stack and --commit are required")
		fs.Usage()
		return ExitUsage
	}
	res, err := manifest.SetCommit(dir, t, commit)
	for _, s := range res.Skipped {
		fmt.Fprintf(stderr, "skipped %s: %v\n", s.File, s.Err)
	}
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return ExitFailed
	}
	sha := strings.ToLower(commit)
	switch {
	case !res.Changed:
		fmt.Fprintf(stdout, "%s: Stack %s already pins %s; nothing changed\n", res.File, res.Stack, sha)
	case res.BranchRemoved:
		fmt.Fprintf(stdout, "%s: Stack %s: spec.commit %s (was tracking branch %s; spec.branch removed)\n", res.File, res.Stack, sha, res.OldBranch)
	case res.OldCommit == "":
		fmt.Fprintf(stdout, "%s: Stack %s: spec.commit %s (added)\n", res.File, res.Stack, sha)
	default:
		fmt.Fprintf(stdout, "%s: Stack %s: spec.commit %s (was %s)\n", res.File, res.Stack, sha, res.OldCommit)
	}
	out := SetCommitOutput{File: res.File, Document: res.Document, Namespace: res.Stack.Namespace, Stack: res.Stack.Name,
		Commit: sha, OldCommit: res.OldCommit, BranchRemoved: res.BranchRemoved, Changed: res.Changed}
	if err := writeOutput(out); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return ExitFailed
	}
	return ExitOK
}

func lint(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("lint", "lint --dir DIR", stderr)
	var dir string
	fs.StringVar(&dir, "dir", ".", "directory holding the manifests (searched recursively, .yaml and .yml)")
	if ok, code := parse(fs, args); !ok {
		return code
	}
	findings, err := manifest.Lint(dir)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return ExitFailed
	}
	if len(findings) == 0 {
		fmt.Fprintf(stderr, "no Stack manifest (pulumi.com Stack) under %s\n", dir)
		return ExitFailed
	}
	bad := 0
	for _, f := range findings {
		name := f.Name
		if f.Namespace != "" {
			name = f.Namespace + "/" + f.Name
		}
		where := fmt.Sprintf("%s (document %d)", f.File, f.Document)
		if f.Editable {
			// The vars a Stage gives the tasks for this Stack.
			fmt.Fprintf(stdout, "ok    Stack %s in %s: stackFile=%s stackNamespace=%s stackName=%s\n", name, where, f.StackFile, f.Namespace, f.Name)
		} else {
			bad++
			fmt.Fprintf(stdout, "FAIL  Stack %s in %s: %s\n", name, where, strings.Join(f.Reasons, "; "))
		}
		for _, w := range f.Warnings {
			fmt.Fprintf(stdout, "      warning: %s\n", w)
		}
	}
	if bad > 0 {
		fmt.Fprintf(stdout, "%d of %d Stacks cannot be edited by Kargo's yaml-update (the stackflow-promote tasks); stackflow-kargo set-commit can edit them\n", bad, len(findings))
		return ExitFailed
	}
	return ExitOK
}
