package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path"
	"sort"
	"strconv"
	"strings"

	yaml3 "go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

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

// Load reads every YAML document under manifestsDir (relative to the
// repository root; "" or "." for all of it) at commit sha of the
// repository at repoDir. A commit missing from a shallow clone is fetched
// first (git fetch --depth=1 origin <sha>). Files ending .yaml, .yml and
// .json are read; documents other than pulumi.com Stacks and Programs and
// v1 ConfigMaps are ignored; a file that does not parse as YAML is an error
// (a broken Stack file must not hide a promotion).
func Load(repoDir, manifestsDir, sha string) (Tree, error) {
	t := Tree{Commit: sha, Stacks: map[string]StackDoc{}, ConfigMaps: map[string]*corev1.ConfigMap{}, Programs: map[string]*pulumiv1.Program{}}
	if err := ensureCommit(repoDir, sha); err != nil {
		return t, err
	}
	files, err := listFiles(repoDir, sha, manifestsDir)
	if err != nil {
		return t, err
	}
	blobs, err := readBlobs(repoDir, files)
	if err != nil {
		return t, err
	}
	for _, f := range files {
		docs, err := splitDocuments(blobs[f.oid])
		if err != nil {
			return t, fmt.Errorf("%s at %s: %w", f.path, short(sha), err)
		}
		for i, doc := range docs {
			if err := t.add(f.path, doc); err != nil {
				return t, fmt.Errorf("%s at %s, document %d: %w", f.path, short(sha), i+1, err)
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

func listFiles(repoDir, sha, dir string) ([]treeFile, error) {
	dir = strings.Trim(path.Clean("/"+dir), "/")
	args := []string{"ls-tree", "-r", "-z", sha}
	if dir != "" {
		args = append(args, "--", dir+"/")
	}
	out, err := git(repoDir, args...)
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
func readBlobs(repoDir string, files []treeFile) (map[string][]byte, error) {
	out := map[string][]byte{}
	if len(files) == 0 {
		return out, nil
	}
	var in bytes.Buffer
	for _, f := range files {
		in.WriteString(f.oid + "\n")
	}
	cmd := exec.Command("git", "cat-file", "--batch")
	cmd.Dir = repoDir
	cmd.Stdin = &in
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("git cat-file: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	r := bufio.NewReader(&stdout)
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

// ensureCommit fetches sha from origin when the repository lacks it (a
// shallow checkout).
func ensureCommit(repoDir, sha string) error {
	if _, err := git(repoDir, "cat-file", "-e", sha+"^{commit}"); err == nil {
		return nil
	}
	if _, err := git(repoDir, "fetch", "-q", "--depth=1", "--", "origin", sha); err != nil {
		return fmt.Errorf("commit %s is not in %s and fetching it failed: %w", short(sha), repoDir, err)
	}
	if _, err := git(repoDir, "cat-file", "-e", sha+"^{commit}"); err != nil {
		return fmt.Errorf("commit %s: not a commit after fetching it", short(sha))
	}
	return nil
}

func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}
