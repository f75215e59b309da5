package manifests

import (
	"context"
	"path"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/stackflow-io/stackflow/github-action/gitcli"
)

// Owners is what a commit of a repository (the pull request's base, which
// the pull request cannot change) gives each status context and comment
// section to: the Pulumi projects, by directory, and the Stack manifests,
// by key. A name the pull request chooses (a Stack it adds, a project it
// renames or adds) that one of them owns would let this job post a status
// another job posts; the action refuses it.
type Owners struct {
	// Projects maps a directory holding Pulumi.yaml (or Pulumi.yml),
	// relative to the repository root and slash-separated ("." for the
	// root), to the project's name.
	Projects map[string]string
	// Stacks maps a Stack's key ("<namespace>/<name>") to the file that
	// holds it, relative to the repository root; nil when not read.
	Stacks map[string]string
}

// ProjectDirs returns the directories whose project is named name, sorted.
func (o Owners) ProjectDirs(name string) []string {
	var dirs []string
	for d, n := range o.Projects {
		if n == name {
			dirs = append(dirs, d)
		}
	}
	sort.Strings(dirs)
	return dirs
}

// ReadOwners reads the Pulumi projects of the whole repository at repoDir at
// commit sha and, with stacks, its Stack manifests (every .yaml, .yml and
// .json file: only when a name must be checked against them). A file that
// does not parse is skipped: this is an inventory of what the commit gives
// out, not a check of its files. The commit must be present (EnsureCommit).
func ReadOwners(ctx context.Context, repoDir, sha string, stacks bool, o Origin) (Owners, error) {
	g := gitcli.Cmd{Dir: repoDir, Timeout: o.Timeout}
	all, err := listFiles(ctx, g, sha, "")
	if err != nil {
		return Owners{}, err
	}
	var want []treeFile
	for _, f := range all {
		if base := path.Base(f.path); base == "Pulumi.yaml" || base == "Pulumi.yml" || stacks {
			want = append(want, f)
		}
	}
	blobs, err := readBlobs(ctx, g, want)
	if err != nil {
		return Owners{}, err
	}
	own := Owners{Projects: map[string]string{}}
	if stacks {
		own.Stacks = map[string]string{}
	}
	for _, f := range want {
		b := blobs[f.oid]
		if base := path.Base(f.path); base == "Pulumi.yaml" || base == "Pulumi.yml" {
			var p struct {
				Name string `json:"name"`
			}
			dir := path.Dir(f.path)
			if _, dup := own.Projects[dir]; !dup && yaml.Unmarshal(b, &p) == nil && p.Name != "" {
				own.Projects[dir] = p.Name
			}
			continue
		}
		docs, err := splitDocuments(b)
		if err != nil {
			continue
		}
		t := Tree{Stacks: map[string]StackDoc{}}
		for _, d := range docs {
			var tm typeMeta
			if yaml.Unmarshal(d, &tm) != nil || tm.Kind != "Stack" || !strings.HasPrefix(tm.APIVersion, "pulumi.com/") {
				continue
			}
			_ = t.add(f.path, d)
		}
		for k, s := range t.Stacks {
			if _, dup := own.Stacks[k]; !dup {
				own.Stacks[k] = s.File
			}
		}
	}
	return own, nil
}
