package verification

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stackflow-io/stackflow/kargo-steps/cli"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
)

// manifests is the manifests repository: dev and test Stacks in files of
// their own, prod last in a file that also holds a ConfigMap (Kargo's own
// yaml-update could not edit it; set-commit can).
func manifests(ns, repoURL, commit string) map[string]string {
	stack := func(name, extra string) string {
		return fmt.Sprintf(`# The %[1]s stage's Stack; Kargo advances spec.commit.
apiVersion: pulumi.com/v1
kind: Stack
metadata:
  name: %[1]s
  namespace: %[2]s
spec:
  stack: %[1]s
  projectRepo: %[3]s
  commit: %[4]s # promoted by stackflow-kargo
%[5]s`, name, ns, repoURL, commit, extra)
	}
	return map[string]string{
		"stacks/dev.yaml":  stack("dev", ""),
		"stacks/test.yaml": stack("test", "  retryMaxBackoffDurationSeconds: 1\n"),
		"stacks/prod.yaml": fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: prod-notes\n  namespace: %s\ndata:\n  owner: platform\n---\n", ns) + stack("prod", ""),
	}
}

// TestKargoPromotion: a promotion the way a Kargo Stage runs it with
// stackflow-kargo: set-commit in a clone of the manifests repository, commit,
// push; a sync standing in for Argo CD applies the pushed manifests; wait
// returns 0 once the operator applied the commit, and 1 with the reason when
// the commit fails. Before the sync, wait does not mistake the push for the
// promotion.
func TestKargoPromotion(t *testing.T) {
	w := newWorld(t, false)
	programRepo := gitrepo.New(t)
	good := programRepo.Commit(t, "v1", map[string]string{"Pulumi.yaml": program})
	better := programRepo.Commit(t, "v2", map[string]string{"Pulumi.yaml": strings.Replace(program, "content: v1", "content: v2", 1)})
	broken := programRepo.Commit(t, "v3 fails", map[string]string{"Pulumi.yaml": strings.Replace(program, `default: ""`, `default: always`, 1)})

	repo := gitrepo.New(t)
	repo.Commit(t, "stacks at v1", manifests(w.ns, programRepo.URL(), good))
	w.sync(t, repo)
	for _, name := range []string{"dev", "test", "prod"} {
		if code, _, stderr := w.kargo(t, "", "wait", "--url", w.url, "--namespace", w.ns, "--stack", name, "--commit", good, "--timeout", "3m", "--token-file", w.tokenFile(t)); code != 0 {
			t.Fatalf("wait for %s at v1: exit %d: %s", name, code, stderr)
		}
	}

	// Promote v2 to prod (the Stack in the multi-document file).
	work := clone(t, repo)
	code, stdout, stderr := w.kargo(t, "", "set-commit", "--dir", work, "--stack", "prod", "--namespace", w.ns, "--commit", better)
	if code != 0 {
		t.Fatalf("set-commit: exit %d: %s%s", code, stdout, stderr)
	}
	before, _ := os.ReadFile(filepath.Join(repo.Work, "stacks/prod.yaml"))
	after, _ := os.ReadFile(filepath.Join(work, "stacks/prod.yaml"))
	if want := bytes.Replace(before, []byte(good), []byte(better), 1); !bytes.Equal(after, want) {
		t.Fatalf("set-commit changed more than the commit:\n%s", after)
	}
	push(t, work, "promote prod to "+better[:7])
	// The push alone is no promotion: until Argo CD syncs, wait answers
	// Pending and times out.
	code, _, stderr = w.kargo(t, "", "wait", "--url", w.url, "--namespace", w.ns, "--stack", "prod", "--commit", better, "--timeout", "3s", "--token-file", w.tokenFile(t))
	if code != cli.ExitFailed || !strings.Contains(stderr, "Timeout") || !strings.Contains(stderr, "CommitNotTargeted") {
		t.Fatalf("wait before the sync: exit %d: %s", code, stderr)
	}
	w.sync(t, repo)
	outFile := filepath.Join(t.TempDir(), "output.json")
	code, _, stderr = w.kargo(t, outFile, "wait", "--url", w.url, "--namespace", w.ns, "--stack", "prod", "--commit", better, "--timeout", "3m", "--token-file", w.tokenFile(t))
	if code != 0 {
		t.Fatalf("wait for prod at v2: exit %d: %s", code, stderr)
	}
	var out cli.Output
	if b, err := os.ReadFile(outFile); err != nil || json.Unmarshal(b, &out) != nil {
		t.Fatalf("$KARGO_OUTPUT: %s (%v)", b, err)
	}
	prod := &pulumiv1.Stack{}
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: "prod"}, prod); err != nil {
		t.Fatal(err)
	}
	if !out.Succeeded || out.Commit != better || out.Update == "" || out.Update != prod.Status.LastUpdate.Name || prod.Status.LastUpdate.LastSuccessfulCommit != better {
		t.Fatalf("output %+v; Stack lastUpdate %+v", out, prod.Status.LastUpdate)
	}
	if got, _ := w.pe.Record(t, "prod"); got != "v2" {
		t.Fatalf("prod's record = %q, want v2", got)
	}

	// Promote the broken commit to test: wait fails with the reason.
	work = clone(t, repo)
	if code, _, stderr := w.kargo(t, "", "set-commit", "--dir", work, "--stack", "test", "--commit", broken); code != 0 {
		t.Fatalf("set-commit: exit %d: %s", code, stderr)
	}
	push(t, work, "promote test to "+broken[:7])
	w.sync(t, repo)
	code, _, stderr = w.kargo(t, "", "wait", "--url", w.url, "--namespace", w.ns, "--stack", "test", "--commit", broken, "--timeout", "3m", "--token-file", w.tokenFile(t))
	if code != cli.ExitFailed || !strings.Contains(stderr, "StackStalled") {
		t.Fatalf("wait for the broken commit: exit %d: %s", code, stderr)
	}
	t.Logf("wait for the broken commit: %s", strings.TrimSpace(stderr[strings.LastIndex(strings.TrimSpace(stderr), "\n")+1:]))
}

// kargo runs stackflow-kargo; outputFile, when set, is $KARGO_OUTPUT.
func (w *world) kargo(t *testing.T, outputFile string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "stackflow-kargo"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = os.Environ()
	if outputFile != "" {
		cmd.Env = append(cmd.Env, cli.OutputEnv+"="+outputFile)
	}
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

func (w *world) tokenFile(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte(w.token), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// sync stands in for Argo CD: it server-side applies every Stack and
// ConfigMap of a fresh checkout of the manifests repository's main branch.
func (w *world) sync(t *testing.T, repo *gitrepo.Repo) {
	t.Helper()
	dir := clone(t, repo)
	files, err := filepath.Glob(filepath.Join(dir, "stacks", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", dir, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); err != nil {
				break
			}
			if len(u.Object) == 0 {
				continue
			}
			if err := w.c.Patch(context.Background(), &u, client.Apply, client.FieldOwner("argocd-standin"), client.ForceOwnership); err != nil {
				t.Fatalf("apply %s %s from %s: %v", u.GetKind(), u.GetName(), filepath.Base(f), err)
			}
		}
	}
}

// clone checks out the repository's main branch into a new directory.
func clone(t *testing.T, repo *gitrepo.Repo) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "manifests")
	git(t, "", "clone", "-q", "--branch", "main", repo.URL(), dir)
	return dir
}

func push(t *testing.T, dir, message string) {
	t.Helper()
	git(t, dir, "-c", "user.name=kargo", "-c", "user.email=kargo@example.com", "commit", "-qam", message)
	git(t, dir, "push", "-q", "origin", "main")
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
