package manifest

import (
	"bytes"
	"fmt"

	yaml "go.yaml.in/yaml/v3"
)

// Finding is Lint's verdict on one Stack manifest.
type Finding struct {
	File      string // slash-separated, relative to dir
	Document  int    // 1-based index of the Stack's document in File
	Name      string
	Namespace string
	// Editable says whether the stackflow-promote tasks (Kargo's
	// yaml-update step) can pin this Stack: the Stack is the first document
	// of its file, gives metadata.namespace, spec is a block mapping,
	// spec.commit exists as a non-empty plain or quoted scalar on one line
	// and spec.branch is absent.
	Editable bool
	Reasons  []string // why not, when not Editable
	// Warnings are what yaml-update would change besides the commit in an
	// editable Stack's file (a comment on spec.commit's line, CRLF endings).
	Warnings []string
	// StackFile is the path, relative to dir, to give as the Kargo task's
	// stackFile var; empty when the Stack is not Editable.
	StackFile string
}

// NoNamespaceReason is why the tasks cannot promote a Stack manifest without
// metadata.namespace: before committing, they check that stackFile holds
// the Stage's Stack, namespace and name, and which namespace such a manifest
// lands in depends on the Argo CD Application, which they cannot see.
const NoNamespaceReason = "metadata.namespace is missing: the stackflow-promote tasks refuse a Stack manifest that does not give its namespace (they check that stackFile holds the Stage's stackNamespace/stackName before committing); add metadata.namespace"

// Lint reports, for every Stack manifest under dir, whether the open-source
// Kargo yaml-update step can edit its spec.commit, and why not.
func Lint(dir string) ([]Finding, error) {
	stacks, _, err := scan(dir)
	if err != nil {
		return nil, err
	}
	out := make([]Finding, 0, len(stacks))
	for _, s := range stacks {
		out = append(out, lint(s))
	}
	return out, nil
}

func lint(s *stack) Finding {
	f := Finding{File: s.f.rel, Document: s.doc + 1, Name: s.name, Namespace: s.namespace}
	if s.doc > 0 {
		f.Reasons = append(f.Reasons, fmt.Sprintf("the Stack is document %d of the file: Kargo's yaml-update edits only the first document; move it to a file of its own", s.doc+1))
	}
	_, spec := get(s.root, "spec")
	if spec == nil || spec.Kind != yaml.MappingNode {
		f.Reasons = append(f.Reasons, "spec is missing: yaml-update edits only existing keys; add spec with spec.commit set to the current commit")
	} else {
		ck := pairs(spec, "commit")
		switch {
		case len(ck) == 0:
			f.Reasons = append(f.Reasons, "spec.commit is missing: yaml-update edits only existing keys; add spec.commit with the current commit")
		default:
			v := spec.Content[ck[0]+1]
			switch {
			case v.Kind == yaml.AliasNode:
				f.Reasons = append(f.Reasons, fmt.Sprintf("spec.commit is an alias (*%s): yaml-update edits only plain or quoted scalars; write the commit itself", v.Value))
			case v.Kind != yaml.ScalarNode:
				f.Reasons = append(f.Reasons, "spec.commit is not a scalar: yaml-update edits only plain or quoted scalars; write spec.commit: <sha>")
			case v.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0:
				f.Reasons = append(f.Reasons, "spec.commit is a block scalar (| or >): yaml-update edits only plain or quoted scalars; write spec.commit: <sha> on one line")
			case v.Style == 0 && v.Value == "":
				f.Reasons = append(f.Reasons, "spec.commit is empty: yaml-update would write the commit over the line of the key that follows it; set spec.commit to the current commit")
			case spec.Style&yaml.FlowStyle != 0:
				f.Reasons = append(f.Reasons, "spec is a flow mapping ({...}): yaml-update replaces the rest of spec.commit's line, which would cut the mapping; write spec as a block mapping")
			default:
				start, end, err := scalarSpan(s.f.li, v)
				switch {
				case err != nil || s.f.li.lineOf(start) != s.f.li.lineOf(end-1):
					f.Reasons = append(f.Reasons, "spec.commit spans several lines: yaml-update replaces only the first line's tail; write spec.commit: <sha> on one line")
				case v.LineComment != "":
					f.Warnings = append(f.Warnings, "yaml-update drops the comment on spec.commit's line")
				}
			}
		}
		if len(pairs(spec, "branch")) > 0 {
			f.Reasons = append(f.Reasons, "spec.branch is set: a pinned Stack may not have spec.branch (the CRD rejects branch and commit together) and yaml-update cannot remove keys; remove spec.branch")
		}
	}
	if s.namespace == "" {
		f.Reasons = append(f.Reasons, NoNamespaceReason)
	}
	if bytes.Contains(s.f.data, []byte("\r\n")) {
		f.Warnings = append(f.Warnings, "the file has CRLF line endings: yaml-update rewrites every line ending of the file as LF")
	}
	f.Editable = len(f.Reasons) == 0
	if !f.Editable {
		f.Warnings = nil
	}
	if f.Editable {
		f.StackFile = f.File
	}
	return f
}
