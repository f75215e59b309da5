package demo

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Stages are the demo's environments, in promotion order, as
// examples/argocd names them: environments/<stage>/ and
// applications/<stage>.yaml.
var Stages = []string{"dev", "test", "prod"}

// stage is one environment of the example: its Stack and Application.
type stage struct {
	Name string
	// StackFile is the Stack's manifest, relative to the manifests
	// repository (environments/<stage>/stack.yaml).
	StackFile      string
	StackNamespace string
	StackName      string
	// Tracks is the branch the Stack tracks ("" when pinned to a commit).
	Tracks string
	// App is the Argo CD Application syncing the environment.
	App string
}

// localRewrite is how the demo adapts the example's Stacks to this machine.
type localRewrite struct {
	// ProgramURL replaces spec.projectRepo.
	ProgramURL string
	// FirstCommit replaces spec.commit of pinned Stacks.
	FirstCommit string
	// RetryCap sets spec.retryMaxBackoffDurationSeconds, so that a failing
	// release stalls within a minute rather than after Stackflow's default
	// backoff (10 s doubling to an hour).
	RetryCap int64
}

// writeEnvironments copies examples/argocd/environments (under src) into
// dst/environments, rewriting each Stack for this machine: the program
// repository on loopback, no Pulumi access token (the operator's agents use
// a file:// backend), the first release's commit for pinned Stacks, and a
// short retry cap. Everything else is the example's, wave annotations
// included. It returns the stages found, in promotion order.
func writeEnvironments(src, dst string, rw localRewrite) ([]stage, error) {
	var stages []stage
	for _, name := range Stages {
		dir := filepath.Join(src, "environments", name)
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("the example has no environment %s: %w", name, err)
		}
		st := stage{Name: name, StackFile: "environments/" + name + "/stack.yaml"}
		for _, e := range entries {
			if e.IsDir() || !isYAML(e.Name()) {
				continue
			}
			docs, err := readDocs(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, err
			}
			var out [][]byte
			for _, u := range docs {
				if u.GetKind() == "Stack" {
					if err := rewriteStack(u, rw); err != nil {
						return nil, fmt.Errorf("%s: %w", filepath.Join(dir, e.Name()), err)
					}
					st.StackNamespace, st.StackName = u.GetNamespace(), u.GetName()
					st.Tracks, _, _ = unstructured.NestedString(u.Object, "spec", "branch")
				}
				b, err := yaml.Marshal(u.Object)
				if err != nil {
					return nil, err
				}
				out = append(out, b)
			}
			target := filepath.Join(dst, "environments", name, e.Name())
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return nil, err
			}
			if err := os.WriteFile(target, bytes.Join(out, []byte("---\n")), 0o644); err != nil {
				return nil, err
			}
		}
		if st.StackName == "" {
			return nil, fmt.Errorf("environment %s of the example holds no Stack", name)
		}
		stages = append(stages, st)
	}
	return stages, nil
}

func rewriteStack(u *unstructured.Unstructured, rw localRewrite) error {
	spec, ok := u.Object["spec"].(map[string]any)
	if !ok {
		return errors.New("a Stack without spec")
	}
	if _, ok := spec["projectRepo"]; !ok {
		return fmt.Errorf("Stack %s has no spec.projectRepo to point at the demo's program repository", u.GetName())
	}
	spec["projectRepo"] = rw.ProgramURL
	if refs, ok := spec["envRefs"].(map[string]any); ok {
		delete(refs, "PULUMI_ACCESS_TOKEN")
		if len(refs) == 0 {
			delete(spec, "envRefs")
		}
	}
	if _, pinned := spec["commit"]; pinned {
		spec["commit"] = rw.FirstCommit
	}
	if rw.RetryCap > 0 {
		spec["retryMaxBackoffDurationSeconds"] = rw.RetryCap
	}
	return nil
}

// argoObjects reads the example's AppProject and Applications, pointed at
// the demo's manifests repository, keyed by stage for the Applications.
func argoObjects(src, manifestsURL string) (project *unstructured.Unstructured, apps map[string]*unstructured.Unstructured, err error) {
	docs, err := readDocs(filepath.Join(src, "appproject.yaml"))
	if err != nil {
		return nil, nil, err
	}
	if len(docs) != 1 || docs[0].GetKind() != "AppProject" {
		return nil, nil, errors.New("examples/argocd/appproject.yaml must hold one AppProject")
	}
	project = docs[0]
	if err := unstructured.SetNestedStringSlice(project.Object, []string{manifestsURL}, "spec", "sourceRepos"); err != nil {
		return nil, nil, err
	}
	apps = map[string]*unstructured.Unstructured{}
	for _, name := range Stages {
		docs, err := readDocs(filepath.Join(src, "applications", name+".yaml"))
		if err != nil {
			return nil, nil, err
		}
		if len(docs) != 1 || docs[0].GetKind() != "Application" {
			return nil, nil, fmt.Errorf("examples/argocd/applications/%s.yaml must hold one Application", name)
		}
		app := docs[0]
		if err := unstructured.SetNestedField(app.Object, manifestsURL, "spec", "source", "repoURL"); err != nil {
			return nil, nil, fmt.Errorf("Application %s: %w", app.GetName(), err)
		}
		apps[name] = app
	}
	return project, apps, nil
}

// readDocs reads the YAML documents of a file as objects (empty documents
// skipped).
func readDocs(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var docs []*unstructured.Unstructured
	for {
		b, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(bytes.TrimSpace(stripComments(b))) == 0 {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &u.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(u.Object) > 0 {
			docs = append(docs, u)
		}
	}
}

// wave is an object's Argo CD sync wave (0 when unset).
func wave(u *unstructured.Unstructured) int {
	var w int
	if _, err := fmt.Sscan(u.GetAnnotations()["argocd.argoproj.io/sync-wave"], &w); err != nil {
		return 0
	}
	return w
}

// byWave orders objects by sync wave, keeping file order within a wave.
func byWave(objs []*unstructured.Unstructured) {
	sort.SliceStable(objs, func(i, j int) bool { return wave(objs[i]) < wave(objs[j]) })
}

func stripComments(b []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line...)
			out = append(out, '\n')
		}
	}
	return out
}

func isYAML(name string) bool {
	return strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
}
