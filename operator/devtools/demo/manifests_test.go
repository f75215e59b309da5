package demo

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestWriteEnvironments adapts the repository's examples/argocd for this
// machine: every file kept, each Stack pointed at the local program
// repository, without the Pulumi access token, pinned Stacks at the first
// release, dev still tracking main.
func TestWriteEnvironments(t *testing.T) {
	src := filepath.Join(substrate.RepoRoot(), "examples", "argocd")
	dst := t.TempDir()
	first := strings.Repeat("1", 40)
	stages, err := writeEnvironments(src, dst, localRewrite{ProgramURL: "http://127.0.0.1:1/program.git", FirstCommit: first, RetryCap: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 3 || stages[0].Name != "dev" || stages[0].Tracks != "main" || stages[1].Tracks != "" {
		t.Fatalf("stages: %+v", stages)
	}
	for _, st := range stages {
		for _, f := range []string{"rbac.yaml", "config.yaml", "stack.yaml", "after-stack.yaml"} {
			if _, err := os.Stat(filepath.Join(dst, "environments", st.Name, f)); err != nil {
				t.Errorf("%s: %v", st.Name, err)
			}
		}
		docs, err := readDocs(filepath.Join(dst, st.StackFile))
		if err != nil {
			t.Fatal(err)
		}
		s := docs[0]
		spec := s.Object["spec"].(map[string]any)
		if spec["projectRepo"] != "http://127.0.0.1:1/program.git" || spec["envRefs"] != nil || fmt.Sprint(spec["retryMaxBackoffDurationSeconds"]) != "5" {
			t.Errorf("%s: spec %v", st.Name, spec)
		}
		if _, pinned := spec["commit"]; pinned != (st.Name != "dev") || (pinned && spec["commit"] != first) {
			t.Errorf("%s: commit %v", st.Name, spec["commit"])
		}
		if wave(s) != 0 || s.GetAnnotations()["argocd.argoproj.io/sync-wave"] == "" {
			t.Errorf("%s: the Stack lost its sync wave", st.Name)
		}
	}
	project, apps, err := argoObjects(src, "http://127.0.0.1:1/manifests.git")
	if err != nil {
		t.Fatal(err)
	}
	if repos := project.Object["spec"].(map[string]any)["sourceRepos"].([]any); len(repos) != 1 || repos[0] != "http://127.0.0.1:1/manifests.git" {
		t.Errorf("AppProject sourceRepos: %v", repos)
	}
	for _, name := range Stages {
		if got := apps[name].Object["spec"].(map[string]any)["source"].(map[string]any)["repoURL"]; got != "http://127.0.0.1:1/manifests.git" {
			t.Errorf("Application %s repoURL %v", name, got)
		}
	}
}
