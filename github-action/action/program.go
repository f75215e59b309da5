package action

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/stackflow-io/stackflow/github-action/gitcli"
	"github.com/stackflow-io/stackflow/github-action/inputs"
	"github.com/stackflow-io/stackflow/github-action/manifests"
	"github.com/stackflow-io/stackflow/github-action/preview"
)

// programRequests are program mode's previews: each listed stack of the
// project in work-dir, at the pull request's head (the checkout).
//
// Keys, and so commit status contexts and comment sections, are
// "<project>/<stack>" with the project's name as the pull request's base
// commit gives it to work-dir (see programProject): the workflow chooses
// work-dir and the stacks, the base branch the name, and the pull request
// neither. Reading the base commit (fetched when the checkout is shallow)
// failing fails every stack: a key cannot be trusted without it.
//
// pinned is the backend the action pinned for a Pulumi access token given
// alone: a Pulumi.yaml's backend.url is then checked (checkProjectBackend).
// When the job sets PULUMI_BACKEND_URL itself, the CLI ignores backend.url.
func programRequests(ctx context.Context, c inputs.Config, pinned string, origin manifests.Origin) []preview.Request {
	dir := c.WorkDir
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(c.Workspace, dir)
	}
	head, err := readProject(dir)
	project, notes, backend := "", []string(nil), ""
	if err == nil {
		project, notes, err = trustedProject(ctx, c, dir, head.Name, origin)
	}
	if err == nil && pinned != "" {
		// The job gives a Pulumi access token alone: a backend.url from
		// the pull request is used only if the workflow allowed it.
		backend, err = checkProjectBackend(head.Backend.URL, pinned, c.Backends)
		if err != nil {
			err = fmt.Errorf("refused, not previewed: %w", err)
		}
	}
	var reqs []preview.Request
	for _, s := range c.Stacks {
		reqs = append(reqs, preview.Request{WorkDir: dir, Stack: s, Source: "program in " + c.WorkDir, Project: head.Name,
			Key: stackKey(project, s), Notes: notes, Backend: backend, Err: err})
	}
	return reqs
}

// projectNameRE is the pulumi CLI's rule for a project's name.
var projectNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}$`)

// project is what the action reads of a Pulumi.yaml.
type project struct {
	Name    string `json:"name"`
	Backend struct {
		URL string `json:"url"`
	} `json:"backend"`
}

// readProject reads the project's Pulumi.yaml (or Pulumi.yml) in dir.
func readProject(dir string) (project, error) {
	var errs []error
	for _, f := range []string{"Pulumi.yaml", "Pulumi.yml"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var p project
		if err := yaml.Unmarshal(b, &p); err != nil {
			return project{}, fmt.Errorf("read %s: %w", f, err)
		}
		if p.Name == "" {
			return project{}, fmt.Errorf("%s names no project", f)
		}
		return p, nil
	}
	return project{}, fmt.Errorf("no Pulumi project in %s: %w", dir, errors.Join(errs...))
}

// trustedProject reads the base commit's projects (and, when the pull
// request renames or adds the project, its Stack manifests) and decides the
// name of the keys with programProject. When the base cannot be read, every
// stack fails under the head's name: a failing status is all such a key
// can post.
func trustedProject(ctx context.Context, c inputs.Config, dir, head string, origin manifests.Origin) (string, []string, error) {
	if !manifests.IsCommit(c.BaseSHA) {
		return head, nil, errors.New("program mode needs the pull request's base commit, which names the project of each status (run on pull_request events)")
	}
	top, rel, err := repoPath(ctx, dir, origin)
	if err != nil {
		return head, nil, err
	}
	if err := manifests.EnsureCommit(ctx, top, c.BaseSHA, origin); err != nil {
		return head, nil, fmt.Errorf("read the base commit, which names the project of each status: %w", err)
	}
	own, err := manifests.ReadOwners(ctx, top, c.BaseSHA, false, origin)
	if err == nil && own.Projects[rel] != head {
		own, err = manifests.ReadOwners(ctx, top, c.BaseSHA, true, origin)
	}
	if err != nil {
		return head, nil, fmt.Errorf("read the base commit's projects: %w", err)
	}
	return programProject(rel, head, own, c.Stacks)
}

// repoPath returns the root of the git repository holding dir and dir
// relative to it (slash-separated, "." for the root).
func repoPath(ctx context.Context, dir string, origin manifests.Origin) (string, string, error) {
	out, err := gitcli.Cmd{Dir: dir, Timeout: origin.Timeout}.Output(ctx, "rev-parse", "--show-toplevel")
	if err != nil {
		return "", "", fmt.Errorf("work-dir %s is not in a git repository (the checkout): %w", dir, err)
	}
	top := strings.TrimSpace(out)
	real := func(p string) string {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
		return p
	}
	rel, err := filepath.Rel(real(top), real(dir))
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", "", fmt.Errorf("work-dir %s is outside its repository %s", dir, top)
	}
	return top, filepath.ToSlash(rel), nil
}

// programProject decides the project name of program mode's keys for the
// project in dir (relative to the repository root), whose Pulumi.yaml at
// the pull request's head names head, given what the base commit owns.
//
//   - The name the base gives dir is used, whatever the head says: a pull
//     request cannot move its stacks' statuses onto another job's.
//   - A pull request that renames the project (or adds it) onto a name the
//     base gives elsewhere is refused: another directory's project, whose
//     statuses and comment sections are <name>/<stack> and whose stacks in
//     the backend the CLI would preview, or a Stack manifest whose key is
//     <name>/<stack> for one of stacks.
//   - Another rename is previewed (the project's stacks under the new name)
//     with a note; a project new at the head takes its own name, if it is
//     a project name (the CLI's rule: letters, digits, "-", "_", ".").
//
// A refused project's stacks keep the base's name (so the failure lands on
// this job's statuses), or, for a project new at the head, none (keys are
// the stacks alone).
func programProject(dir, head string, own manifests.Owners, stacks []string) (string, []string, error) {
	base, atBase := own.Projects[dir]
	if atBase && head == base {
		return base, nil, nil
	}
	what := "names the project"
	if atBase {
		what = fmt.Sprintf("renames the project %s to", manifests.Quote(base))
	}
	if !projectNameRE.MatchString(head) {
		return base, nil, fmt.Errorf("refused, not previewed: Pulumi.yaml %s %s, which is not a Pulumi project name (letters, digits, -, _ and . only)", what, manifests.Quote(head))
	}
	for _, d := range own.ProjectDirs(head) {
		if d != dir {
			return base, nil, fmt.Errorf("refused, not previewed: Pulumi.yaml %s %s, the name of the project in %s on the base branch: that project's commit statuses and comment sections (%s/<stack>) and its stacks in the backend are not this job's", what, manifests.Quote(head), d, head)
		}
	}
	for _, s := range stacks {
		if f, ok := own.Stacks[stackKey(head, s)]; ok && strings.Count(s, "/") != 2 {
			return base, nil, fmt.Errorf("refused, not previewed: Pulumi.yaml %s %s, which makes stack %s's key %s, the key of the Stack in %s on the base branch: its commit status and comment section are not this job's", what, manifests.Quote(head), s, stackKey(head, s), f)
		}
	}
	if atBase {
		return base, []string{fmt.Sprintf("Pulumi.yaml renames the project %s to %s: the preview is of the stacks of %s, and its commit statuses and comment sections keep the name the base branch gives, %s.", manifests.Quote(base), manifests.Quote(head), manifests.Quote(head), manifests.Quote(base))}, nil
	}
	return head, nil, nil
}
