// Package manifest finds PKO Stack manifests (apiVersion pulumi.com/*, kind
// Stack) in a manifests repository checked out on disk, and edits them for a
// Kargo promotion.
//
// SetCommit pins one Stack to a commit: it sets spec.commit (creating it if
// missing) and removes spec.branch, surgically. The file is parsed with
// go.yaml.in/yaml/v3 only to learn where things are (node line and column);
// the edit splices the original bytes, so every other byte of the file (other
// documents, comments, key order, indentation, quoting, document separators, a
// UTF-8 BOM, CRLF line endings) is left as it was. Each edit is checked by
// parsing the result again before the file is replaced (atomically, keeping its
// mode); an edit it cannot make exactly is an error that says how to fix the
// manifest, never a reformatted file.
//
// The commit keeps the quoting of the value it replaces. A missing spec.commit
// takes spec.branch's line when there is one, and otherwise becomes spec's
// first field, at the indentation and with the line ending spec's fields use.
// A SHA that YAML would read as a number (all digits, say) is written
// double-quoted. The target matches a Stack by metadata.name, and by
// metadata.namespace when both give one; no match wraps ErrNoMatch, several
// wrap ErrAmbiguous, and both list the Stacks found (name, namespace, file,
// document).
//
// Lint reports, for every Stack found, whether the open-source Kargo
// yaml-update step could edit it and, when not, why. yaml-update parses only
// the first document of a file, looks up an existing scalar and replaces the
// rest of its line with the new value (it adds no key and removes none). So a
// Stack is editable when it is the first document of its file, spec is a
// block mapping, spec.commit exists as a non-empty plain or quoted scalar on
// one line, and spec.branch is absent. Warnings say what yaml-update would
// change besides (a comment on the commit's line, CRLF line endings).
//
// Both walk a directory recursively: files ending .yaml or .yml, skipping
// hidden directories (.git included) and every symbolic link, so nothing
// outside the directory is read or written. A file that does not parse is an
// error naming it when its bytes mention both "pulumi.com" and "Stack" (it may
// hold the Stack looked for, or a second one of the same name); otherwise it is
// skipped (Helm templates and the like) and, by SetCommit, reported in
// Result.Skipped.
// Only top-level documents are looked at: a Stack inside a kind: List is not
// found.
//
// The package imports the standard library and go.yaml.in/yaml/v3 only; it is
// called by the stackflow-kargo CLI (set-commit and lint).
package manifest
