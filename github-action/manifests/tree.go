package manifests

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	yaml3 "go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/stackflow-io/stackflow/github-action/gitcli"
	"github.com/stackflow-io/stackflow/internal/redact"
	"github.com/stackflow-io/stackflow/internal/revision"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// Tree is what the manifests directory holds at one commit: the Stacks,
// ConfigMaps and Programs, each keyed by "<namespace>/<name>" ("<name>"
// alone when the manifest sets no namespace).
type Tree struct {
	// Commit is the commit read.
	Commit     string
	Stacks     map[string]StackDoc
	ConfigMaps map[string]*corev1.ConfigMap
	Programs   map[string]*pulumiv1.Program
}

// StackDoc is a Stack manifest and the file it is in (relative to the
// repository root).
type StackDoc struct {
	File  string
	Stack *pulumiv1.Stack
}

// key is "<namespace>/<name>", or "<name>" without a namespace.
func key(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// Origin says how a commit that a shallow checkout lacks is fetched from
// the repository's origin remote, and bounds every git command.
type Origin struct {
	// Timeout bounds each git command (the git-timeout input; 0: none).
	Timeout time.Duration
	// Token, when set, authenticates the fetch if origin is an https://
	// URL on one of TokenHosts (the action passes its github-token and the
	// host of GITHUB_SERVER_URL): a checkout made with
	// persist-credentials: false keeps no credentials of its own. It is
	// given to git through its environment, never on a command line.
	Token      string
	TokenHosts []string
}

// Load reads every YAML document under manifestsDir (relative to the
// repository root; "" or "." for all of it) at commit sha of the
// repository at repoDir. A commit missing from a shallow clone is fetched
// first (git fetch --depth=1 origin <sha>; see Origin). Files ending .yaml,
// .yml and .json are read; documents other than pulumi.com Stacks and
// Programs and v1 ConfigMaps are ignored; a file that does not parse as
// YAML is an error (a broken Stack file must not hide a promotion).
func Load(ctx context.Context, repoDir, manifestsDir, sha string, o Origin) (Tree, error) {
	t := Tree{Commit: sha, Stacks: map[string]StackDoc{}, ConfigMaps: map[string]*corev1.ConfigMap{}, Programs: map[string]*pulumiv1.Program{}}
	if err := EnsureCommit(ctx, repoDir, sha, o); err != nil {
		return t, err
	}
	g := gitcli.Cmd{Dir: repoDir, Timeout: o.Timeout}
	files, err := listFiles(ctx, g, sha, manifestsDir)
	if err != nil {
		return t, err
	}
	blobs, err := readBlobs(ctx, g, files)
	if err != nil {
		return t, err
	}
	for _, f := range files {
		docs, err := splitDocuments(blobs[f.oid])
		if err != nil {
			return t, fmt.Errorf("%s at %s: %w", f.path, revision.Short(sha), err)
		}
		for i, doc := range docs {
			if err := t.add(f.path, doc); err != nil {
				return t, fmt.Errorf("%s at %s, document %d: %w", f.path, revision.Short(sha), i+1, err)
			}
		}
	}
	return t, nil
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

func (t *Tree) add(file string, doc []byte) error {
	var tm typeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil // not an object (a list, a scalar): not ours
	}
	group, _, _ := strings.Cut(tm.APIVersion, "/")
	if !strings.Contains(tm.APIVersion, "/") {
		group = ""
	}
	switch {
	case group == pulumiv1.GroupVersion.Group && tm.Kind == "Stack":
		s := &pulumiv1.Stack{}
		if err := yaml.Unmarshal(doc, s); err != nil {
			return fmt.Errorf("Stack: %w", err)
		}
		k := key(s.Namespace, s.Name)
		if prev, dup := t.Stacks[k]; dup {
			return fmt.Errorf("Stack %s is also in %s", k, prev.File)
		}
		t.Stacks[k] = StackDoc{File: file, Stack: s}
	case group == pulumiv1.GroupVersion.Group && tm.Kind == "Program":
		p := &pulumiv1.Program{}
		if err := yaml.Unmarshal(doc, p); err != nil {
			return fmt.Errorf("Program: %w", err)
		}
		t.Programs[key(p.Namespace, p.Name)] = p
	case tm.APIVersion == "v1" && tm.Kind == "ConfigMap":
		cm := &corev1.ConfigMap{}
		if err := yaml.Unmarshal(doc, cm); err != nil {
			return fmt.Errorf("ConfigMap: %w", err)
		}
		t.ConfigMaps[key(cm.Namespace, cm.Name)] = cm
	}
	return nil
}

// splitDocuments splits a multi-document YAML stream into its documents
// (each re-encoded), skipping empty ones.
func splitDocuments(b []byte) ([][]byte, error) {
	dec := yaml3.NewDecoder(bytes.NewReader(b))
	var out [][]byte
	for {
		var n yaml3.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(n.Content) == 0 || (n.Content[0].Kind == yaml3.ScalarNode && n.Content[0].Tag == "!!null") {
			continue
		}
		doc, err := yaml3.Marshal(&n)
		if err != nil {
			return nil, err
		}
		out = append(out, doc)
	}
}

type treeFile struct{ path, oid string }

func listFiles(ctx context.Context, g gitcli.Cmd, sha, dir string) ([]treeFile, error) {
	dir = strings.Trim(path.Clean("/"+dir), "/")
	args := []string{"ls-tree", "-r", "-z", sha}
	if dir != "" {
		args = append(args, "--", dir+"/")
	}
	out, err := g.Output(ctx, args...)
	if err != nil {
		return nil, err
	}
	var files []treeFile
	for _, rec := range strings.Split(out, "\x00") {
		// <mode> SP <type> SP <oid> TAB <path>
		meta, p, ok := strings.Cut(rec, "\t")
		if !ok {
			continue
		}
		f := strings.Fields(meta)
		if len(f) != 3 || f[1] != "blob" {
			continue
		}
		switch strings.ToLower(path.Ext(p)) {
		case ".yaml", ".yml", ".json":
			files = append(files, treeFile{path: p, oid: f[2]})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	return files, nil
}

// readBlobs reads the files' blobs with one `git cat-file --batch`.
func readBlobs(ctx context.Context, g gitcli.Cmd, files []treeFile) (map[string][]byte, error) {
	out := map[string][]byte{}
	if len(files) == 0 {
		return out, nil
	}
	var in bytes.Buffer
	for _, f := range files {
		in.WriteString(f.oid + "\n")
	}
	stdout, stderr, err := g.Run(ctx, &in, "cat-file", "--batch")
	var te *gitcli.TimeoutError
	if errors.As(err, &te) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("git cat-file: %v: %s", err, strings.TrimSpace(stderr))
	}
	r := bufio.NewReader(strings.NewReader(stdout))
	for range files {
		header, err := r.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("git cat-file: %w", err)
		}
		f := strings.Fields(header)
		if len(f) != 3 {
			return nil, fmt.Errorf("git cat-file: %q", strings.TrimSpace(header))
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, fmt.Errorf("git cat-file: %q", strings.TrimSpace(header))
		}
		b := make([]byte, n+1) // and the newline
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, fmt.Errorf("git cat-file: %w", err)
		}
		out[f[0]] = b[:n]
	}
	return out, nil
}

// EnsureCommit fetches sha from origin when the repository at repoDir
// lacks it (a shallow checkout); see Origin.
func EnsureCommit(ctx context.Context, repoDir, sha string, o Origin) error {
	g := gitcli.Cmd{Dir: repoDir, Timeout: o.Timeout}
	if _, err := g.Output(ctx, "cat-file", "-e", sha+"^{commit}"); err == nil {
		return nil
	}
	fetch := gitcli.Cmd{Dir: repoDir, Timeout: o.Timeout, Env: originEnviron(ctx, g, o)}
	if _, err := fetch.Output(ctx, "fetch", "-q", "--depth=1", "--", "origin", sha); err != nil {
		if o.Token != "" {
			err = errors.New(redact.NewValues(o.Token, basicAuth(o.Token)).Text(err.Error()))
		}
		return fmt.Errorf("commit %s is not in %s and fetching it failed: %w", revision.Short(sha), repoDir, err)
	}
	if _, err := g.Output(ctx, "cat-file", "-e", sha+"^{commit}"); err != nil {
		return fmt.Errorf("commit %s: not a commit after fetching it", revision.Short(sha))
	}
	return nil
}

// originEnviron is git's environment for a fetch from origin: no prompts
// and, when origin is an https:// URL on one of o.TokenHosts, o.Token as
// an Authorization header scoped to that host (after an empty value, which
// drops a header the checkout may have stored, so only one is sent).
func originEnviron(ctx context.Context, g gitcli.Cmd, o Origin) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_CONFIG_COUNT=") && !strings.HasPrefix(kv, "GIT_CONFIG_KEY_") && !strings.HasPrefix(kv, "GIT_CONFIG_VALUE_") {
			env = append(env, kv)
		}
	}
	env = append(env, "GIT_TERMINAL_PROMPT=0")
	if o.Token == "" {
		return env
	}
	raw, err := g.Output(ctx, "remote", "get-url", "origin")
	if err != nil {
		return env
	}
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Scheme != "https" || u.Host == "" || !tokenAllowed(u, o.TokenHosts) {
		return env
	}
	key := "http." + u.Scheme + "://" + u.Host + "/.extraHeader"
	return append(env, "GIT_CONFIG_COUNT=2", "GIT_CONFIG_KEY_0="+key, "GIT_CONFIG_VALUE_0=",
		"GIT_CONFIG_KEY_1="+key, "GIT_CONFIG_VALUE_1=Authorization: Basic "+basicAuth(o.Token))
}
