package manifests

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/stackflow-io/stackflow/github-action/gitcli"
	"github.com/stackflow-io/stackflow/github-action/preview"
	"github.com/stackflow-io/stackflow/internal/redact"
	"github.com/stackflow-io/stackflow/internal/revision"
	"github.com/stackflow-io/stackflow/internal/stackref"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// PlanOptions configure Plan.
type PlanOptions struct {
	// GitToken authenticates clones of program repositories on TokenHosts
	// (HTTP basic auth x-access-token:<token>, as GitHub expects). It is
	// passed to git through its environment, never on a command line, and
	// masked in errors and results.
	GitToken string
	// TokenHosts are the hosts ("host", or "host:port" for another port
	// than the scheme's default) that receive GitToken: the git-token-hosts
	// input. A repository elsewhere is cloned without it.
	TokenHosts []string
	// Backends are the state backend URLs a manifest may name (spec.backend,
	// a PULUMI_BACKEND_URL variable): the backends input and the job's own
	// backend. A Stack naming another is refused.
	Backends []string
	// AllowLoopbackHTTP lets a projectRepo be http:// on a loopback address
	// (127.0.0.0/8, ::1, localhost). The action's tests set it, for their
	// git servers; no input sets it, so a pull request never gets the
	// action to clone over plain http.
	AllowLoopbackHTTP bool
	// TempDir is where program repositories are cloned ("" for the
	// system's temporary directory).
	TempDir string
	// Env is added to every request's environment.
	Env map[string]string
	// GitTimeout bounds each git command of a clone (the git-timeout
	// input; 0: none): a server that does not answer fails that Stack
	// only.
	GitTimeout time.Duration
	// Owners, when set, is what the base commit of the manifests
	// repository holds outside ManifestsDir: a Stack the pull request adds
	// whose status context belongs there is refused (see checkOwner).
	Owners *Owners
	// ManifestsDir is the manifests-dir input, relative to the repository
	// root.
	ManifestsDir string
}

// Unresolved starts the Note of each input CI cannot resolve.
const Unresolved = "Unresolved in CI: "

// Plan prepares the preview of a changed Stack: the program repository
// cloned at the Stack's head commit (or its branch's head) into a temporary
// directory, with the Stack's configuration, and Notes for everything the
// preview cannot take into account. cleanup removes the clone; it is never
// nil and may be called more than once.
//
// Configuration: spec.config values are typed JSON, set as such (strings as
// strings; numbers, booleans, objects and arrays keep their type, the whole
// value under its key, never as property paths); spec.secrets literals and
// Literal secretsRef values are set as secrets; configRef values come from
// the ConfigMaps of tree (the head commit's), in the Stack's namespace,
// parsed as JSON when the reference says json: true. Environment: Literal
// envRefs and envs ConfigMaps found in tree. spec.backend and spec.refresh
// are honoured, and spec.secretsProvider when the stack must be created for
// the preview.
//
// Not resolvable in CI, and so listed in Notes (starting Unresolved): Secret,
// Env and FS references (secretsRef, envRefs, gitAuth is replaced by
// GitToken), envSecrets, ConfigMaps not in tree, ESC environments,
// accessTokenSecret. A Stack whose program CI cannot get (fluxSource, a
// programRef Program not in tree, no source) and a removed Stack give a
// Request with Skip set and a Note: not previewed. A Stack with
// spec.preview gets a Note and is previewed.
//
// Refused, and so not previewed, with the reason in Err (see refuse.go): a
// projectRepo other than https://, a commit that is not a 40-hex SHA, a
// branch that is not a branch name, a spec.backend (or PULUMI_BACKEND_URL
// variable) not in Backends, a variable that steers the CLI or git
// (PULUMI_*, GIT_*, proxies, TLS roots, PATH, HOME, the loader's).
//
// On error (a refused Stack, a clone that failed), the returned Request
// still names the stack and carries the error in Err, so preview.Run
// reports it as Failed.
func Plan(ctx context.Context, c Change, tree Tree, o PlanOptions) (preview.Request, func(), error) {
	noop := func() {}
	req := preview.Request{Key: c.Key, Source: source(c, "")}
	if o.GitToken != "" {
		req.Masks = append(req.Masks, o.GitToken, basicAuth(o.GitToken))
	}
	if c.Removed || c.Head == nil {
		req.Stack = c.Base.Spec.Stack
		req.Skip = true
		what := "keeps the stack and its resources (spec.destroyOnFinalize is false)"
		if c.Base.Spec.DestroyOnFinalize {
			what = "destroys the stack's resources (spec.destroyOnFinalize is true)"
		}
		req.Notes = append(req.Notes, fmt.Sprintf("Stack %s was removed from the manifests (%s), which is not previewed: deleting the Stack object %s.", c.Key, c.File, what))
		return req, noop, nil
	}
	s := c.Head
	req.Stack = s.Spec.Stack
	refused := func(err error) (preview.Request, func(), error) {
		return failPlan(req, nil, fmt.Errorf("refused, not previewed: %w", err))
	}
	if err := checkOwner(c, o.ManifestsDir, o.Owners); err != nil {
		return refused(err)
	}
	if err := checkName(s); err != nil {
		return refused(err)
	}
	if err := checkBackend("spec.backend", s.Spec.Backend, o.Backends); err != nil {
		return refused(err)
	}
	req.Backend = s.Spec.Backend
	req.Refresh = s.Spec.Refresh
	req.SecretsProvider = s.Spec.SecretsProvider
	req.Config = map[string]preview.ConfigValue{}
	req.Env = map[string]string{}
	for k, v := range o.Env {
		req.Env[k] = v
	}
	var notes []string
	unresolved := func(format string, a ...any) { notes = append(notes, Unresolved+fmt.Sprintf(format, a...)) }
	if s.Spec.Preview {
		notes = append(notes, "spec.preview is true: the operator only previews this Stack, so merging changes no infrastructure.")
	}

	for _, k := range slices.Sorted(maps.Keys(s.Spec.Config)) {
		req.Config[k] = preview.ConfigValue{Value: string(s.Spec.Config[k].Raw), JSON: true}
	}
	// The Stack's references, from the one walk of them the operator uses
	// too (stackref.Refs), taken field by field in the order the operator
	// applies them: a later value of a key replaces an earlier one.
	refs := stackref.Refs(s)
	of := func(field string) []stackref.Ref {
		return slices.DeleteFunc(slices.Clone(refs), func(r stackref.Ref) bool { return r.Field != field })
	}
	for _, r := range of(stackref.FieldConfigRef) {
		ref := s.Spec.ConfigRef[r.Entry]
		cmKey := key(s.Namespace, r.Name)
		v, ok := configMapValue(tree, cmKey, r.Key)
		if !ok {
			unresolved("configRef %s: ConfigMap %s (key %s) is not in the manifests; the preview runs without it.", r.Entry, cmKey, r.Key)
			continue
		}
		req.Config[r.Entry] = preview.ConfigValue{Value: v, JSON: ref.JSON != nil && *ref.JSON}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Spec.Secrets)) {
		req.Config[k] = preview.ConfigValue{Value: s.Spec.Secrets[k], Secret: true}
	}
	for _, r := range of(stackref.FieldSecretsRef) {
		ref := s.Spec.SecretRefs[r.Entry]
		if ref.SelectorType == pulumiv1.ResourceSelectorLiteral && ref.LiteralRef != nil {
			req.Config[r.Entry] = preview.ConfigValue{Value: ref.LiteralRef.Value, Secret: true}
			continue
		}
		unresolved("secretsRef %s (%s): the preview runs without it (the stack's stored value, if any, applies).", r.Entry, describeRef(ref))
	}
	for _, r := range of(stackref.FieldEnvRefs) {
		ref := s.Spec.EnvRefs[r.Entry]
		if ref.SelectorType == pulumiv1.ResourceSelectorLiteral && ref.LiteralRef != nil {
			if err := checkVariable("envRefs", r.Entry, ref.LiteralRef.Value, o.Backends); err != nil {
				return refused(err)
			}
			req.Env[r.Entry] = ref.LiteralRef.Value
			continue
		}
		unresolved("envRefs %s (%s): the preview runs without it.", r.Entry, describeRef(ref))
	}
	for _, r := range of(stackref.FieldEnvs) {
		cm := tree.ConfigMaps[key(s.Namespace, r.Name)]
		if cm == nil {
			unresolved("envs: ConfigMap %s is not in the manifests; the preview runs without its variables.", key(s.Namespace, r.Name))
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(cm.Data)) {
			if err := checkVariable("envs ConfigMap "+key(s.Namespace, r.Name)+" variable", k, cm.Data[k], o.Backends); err != nil {
				return refused(err)
			}
			req.Env[k] = cm.Data[k]
		}
	}
	for _, r := range refs {
		switch r.Field {
		case stackref.FieldConfigRef, stackref.FieldSecretsRef, stackref.FieldEnvRefs, stackref.FieldEnvs:
			// Resolved above.
		case stackref.FieldEnvSecrets:
			unresolved("envSecrets: Secret %s; the preview runs without its variables.", key(s.Namespace, r.Name))
		case stackref.FieldAccessTokenSecret:
			unresolved("accessTokenSecret %s: the preview uses the action's Pulumi credentials.", r.Name)
		case stackref.FieldProjectRepo, stackref.FieldFluxSource, stackref.FieldProgramRef:
			// The program's source: resolved below.
		case stackref.FieldPrerequisites:
			// An order of deployment, which a preview does not follow.
		default:
			if strings.HasPrefix(r.Field, stackref.GitAuthPrefix) || r.Field == stackref.FieldGitAuthSecret {
				// The Stack's git credentials live in the cluster: the
				// action clones with its own git-token, where allowed.
				continue
			}
			// A reference the preview does not know how to read (a field
			// added to the Stack type since): said, never silently dropped.
			unresolved("%s: the preview does not read it and runs without it.", r.Path())
		}
	}
	for _, e := range s.Spec.Environment {
		unresolved("environment %s (Pulumi ESC): the preview runs without it.", e)
	}

	skip := func(note string) (preview.Request, func(), error) {
		req.Skip = true
		req.Notes = append(notes, note)
		return req, noop, nil
	}
	g := git0(s)
	switch {
	case s.Spec.FluxSource != nil:
		ref := s.Spec.FluxSource.SourceRef
		return skip(Unresolved + fmt.Sprintf("fluxSource %s %s: CI cannot fetch a Flux artifact, so nothing was previewed.", ref.Kind, key(s.Namespace, ref.Name)))
	case s.Spec.ProgramRef != nil:
		pk := key(s.Namespace, s.Spec.ProgramRef.Name)
		p := tree.Programs[pk]
		if p == nil {
			return skip(Unresolved + fmt.Sprintf("programRef: Program %s is not in the manifests, so nothing was previewed.", pk))
		}
		dir, err := os.MkdirTemp(o.TempDir, "stackflow-program-")
		if err != nil {
			return failPlan(req, notes, err)
		}
		cleanup := func() { _ = os.RemoveAll(dir) }
		b, err := renderProgram(p)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), b, 0o644)
		}
		if err != nil {
			cleanup()
			return failPlan(req, notes, fmt.Errorf("write Program %s: %w", pk, err))
		}
		req.WorkDir = dir
		req.Source = source(c, "")
		req.Notes = notes
		return req, cleanup, nil
	case g.ProjectRepo == "":
		return skip("The Stack names no program source (projectRepo, programRef or fluxSource), so nothing was previewed.")
	}
	repo, err := checkSource(g, o.AllowLoopbackHTTP)
	if err != nil {
		return refused(err)
	}

	dir, err := os.MkdirTemp(o.TempDir, "stackflow-clone-")
	if err != nil {
		return failPlan(req, notes, err)
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	token := ""
	if tokenAllowed(repo, o.TokenHosts) {
		token = o.GitToken
	}
	sha, err := clone(ctx, repo, g.Commit, g.Branch, dir, token, o.GitTimeout)
	if err != nil {
		cleanup()
		return failPlan(req, notes, err)
	}
	work := filepath.Join(dir, filepath.FromSlash(strings.Trim(g.RepoDir, "/")))
	if rel, err := filepath.Rel(dir, work); err != nil || strings.HasPrefix(rel, "..") {
		cleanup()
		return failPlan(req, notes, fmt.Errorf("repoDir %q leaves the repository", g.RepoDir))
	}
	if _, err := os.Stat(work); err != nil {
		cleanup()
		return failPlan(req, notes, fmt.Errorf("repoDir %q is not in %s at %s", g.RepoDir, redact.URLCredentials(g.ProjectRepo), revision.Short(sha)))
	}
	req.WorkDir = work
	req.Source = source(c, sha)
	req.Notes = notes
	return req, cleanup, nil
}

// PlanAll plans every change (see Plan), errors included as Requests with
// Err, in the changes' order; cleanup removes all clones.
func PlanAll(ctx context.Context, changes []Change, tree Tree, o PlanOptions) ([]preview.Request, func()) {
	var reqs []preview.Request
	var cleanups []func()
	for _, c := range changes {
		r, cl, _ := Plan(ctx, c, tree, o)
		reqs = append(reqs, r)
		cleanups = append(cleanups, cl)
	}
	return reqs, func() {
		for _, cl := range cleanups {
			cl()
		}
	}
}

func failPlan(req preview.Request, notes []string, err error) (preview.Request, func(), error) {
	if masks := redact.NewValues(req.Masks...); masks.Len() > 0 {
		err = errors.New(masks.Text(err.Error()))
	}
	req.Err = err
	req.Notes = notes
	return req, func() {}, err
}

// source is "Stack dev/web (stacks/dev.yaml): commit 1a2b3c4 → 5d6e7f8";
// headSHA is the commit a branch resolved to.
func source(c Change, headSHA string) string {
	prefix := fmt.Sprintf("Stack %s (%s): ", c.Key, c.File)
	if c.Removed {
		return prefix + "removed"
	}
	head := describeSource(c.Head, headSHA)
	if c.Added || c.Base == nil {
		return prefix + "new, " + head
	}
	base := describeSource(c.Base, "")
	if base != head {
		if strings.HasPrefix(base, "commit ") && strings.HasPrefix(head, "commit ") {
			head = strings.TrimPrefix(head, "commit ")
		}
		return prefix + base + " → " + head
	}
	return prefix + head + " (" + strings.Join(c.Reasons, ", ") + " changed)"
}

func describeSource(s *pulumiv1.Stack, resolved string) string {
	g := git0(s)
	switch {
	case s.Spec.ProgramRef != nil:
		return "Program " + s.Spec.ProgramRef.Name
	case s.Spec.FluxSource != nil:
		return s.Spec.FluxSource.SourceRef.Kind + " " + s.Spec.FluxSource.SourceRef.Name
	case g.Commit != "" && IsCommit(g.Commit):
		return "commit " + revision.Short(g.Commit)
	case g.Commit != "":
		return "commit " + Quote(g.Commit)
	case g.Branch != "":
		b := g.Branch
		if checkBranch(b) != nil {
			b = Quote(b)
		}
		if resolved != "" {
			return "branch " + b + " (" + revision.Short(resolved) + ")"
		}
		return "branch " + b
	}
	return "no source"
}

func describeRef(r pulumiv1.ResourceRef) string {
	switch {
	case r.SelectorType == pulumiv1.ResourceSelectorSecret && r.SecretRef != nil:
		return fmt.Sprintf("Secret %s key %s", r.SecretRef.Name, r.SecretRef.Key)
	case r.SelectorType == pulumiv1.ResourceSelectorEnv && r.Env != nil:
		return "the operator's environment variable " + r.Env.Name
	case r.SelectorType == pulumiv1.ResourceSelectorFS && r.FileSystem != nil:
		return "the operator's file " + r.FileSystem.Path
	}
	return string(r.SelectorType)
}

// clone fetches commit (or the head of branch) of repo into dir, shallow,
// and checks it out; it returns the commit checked out. token, when set, is
// sent to repo's host only (the caller decides whether that host may have
// it). commit and branch have been checked (checkSource), and every
// positional argument follows "--" all the same, so none is read as an
// option.
func clone(ctx context.Context, repo *url.URL, commit, branch, dir, token string, timeout time.Duration) (string, error) {
	g := gitcli.Cmd{Dir: dir, Env: gitEnviron(repo, token), Timeout: timeout}
	run := func(args ...string) (string, error) {
		out, stderr, err := g.Run(ctx, nil, args...)
		var te *gitcli.TimeoutError
		if errors.As(err, &te) {
			return "", err
		}
		if err != nil {
			msg := gitMessage(out + "\n" + stderr)
			if token != "" {
				msg = redact.NewValues(token, basicAuth(token)).Text(msg)
			}
			return "", fmt.Errorf("git %s: %v: %s", args[0], err, msg)
		}
		return strings.TrimSpace(out), nil
	}
	if _, err := run("init", "-q"); err != nil {
		return "", err
	}
	if _, err := run("remote", "add", "--", "origin", repo.String()); err != nil {
		return "", err
	}
	ref := commit
	if ref == "" {
		ref = "refs/heads/" + strings.TrimPrefix(branch, "refs/heads/")
	}
	where := redact.URLCredentials(repo.String())
	if _, err := run("fetch", "-q", "--depth=1", "--", "origin", ref); err != nil {
		var te *gitcli.TimeoutError
		if commit == "" || errors.As(err, &te) {
			// A server that does not answer is not asked again.
			what := "branch " + Quote(branch)
			if commit != "" {
				what = "commit " + revision.Short(commit)
			}
			return "", fmt.Errorf("fetch %s of %s: %w", what, where, err)
		}
		// A server that refuses to serve a commit by ID: fetch everything.
		if _, err2 := run("fetch", "-q", "--", "origin"); err2 != nil {
			return "", fmt.Errorf("fetch commit %s of %s: %w", revision.Short(commit), where, err)
		}
	}
	target := "FETCH_HEAD"
	if commit != "" {
		target = commit
	}
	if _, err := run("-c", "advice.detachedHead=false", "checkout", "-q", "--detach", target); err != nil {
		return "", fmt.Errorf("check out %s of %s: %w", revision.Short(target), where, err)
	}
	return run("rev-parse", "HEAD")
}

// gitEnviron is git's environment for a clone of repo: the process's
// (without the pulumi CLI's settings, which git has no use for, and
// without GIT_CONFIG_* variables, which would mix with ours), no
// prompts, no system configuration, only repo's protocol allowed (so no
// redirect or submodule leads to another), and the token, if any, as an
// Authorization header scoped to repo's scheme and host.
func gitEnviron(repo *url.URL, token string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PULUMI_") && !strings.HasPrefix(kv, "GIT_CONFIG_") {
			env = append(env, kv)
		}
	}
	env = append(env, "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "GIT_ALLOW_PROTOCOL="+repo.Scheme)
	if token != "" {
		env = append(env, "GIT_CONFIG_COUNT=1",
			"GIT_CONFIG_KEY_0=http."+repo.Scheme+"://"+repo.Host+"/.extraHeader",
			"GIT_CONFIG_VALUE_0=Authorization: Basic "+basicAuth(token))
	}
	return env
}

// gitMessage keeps git's output readable in one line: its fatal: and
// error: lines (else its last line), joined, cut to 300 characters.
func gitMessage(out string) string {
	var keep []string
	last := ""
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		last = l
		if strings.HasPrefix(l, "fatal:") || strings.HasPrefix(l, "error:") {
			keep = append(keep, l)
		}
	}
	if len(keep) == 0 && last != "" {
		keep = []string{last}
	}
	msg := strings.Join(keep, "; ")
	if r := []rune(msg); len(r) > 300 {
		msg = string(r[:299]) + "…"
	}
	return msg
}

func basicAuth(token string) string {
	return base64.StdEncoding.EncodeToString([]byte("x-access-token:" + token))
}

// renderProgram renders a Program as the operator does: name and the yaml
// runtime, then the program's sections.
func renderProgram(p *pulumiv1.Program) ([]byte, error) {
	head, err := yaml.Marshal(map[string]string{"name": p.Name, "runtime": "yaml"})
	if err != nil {
		return nil, err
	}
	body, err := yaml.Marshal(p.Program)
	if err != nil {
		return nil, err
	}
	if string(body) == "{}\n" {
		return head, nil
	}
	return append(head, body...), nil
}
