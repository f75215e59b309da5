package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/agent"
	"github.com/stackflow-io/stackflow/operator/internal/artifact"
	"github.com/stackflow-io/stackflow/operator/internal/controller"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// startProgramOperator runs only the Program controller, on its own manager,
// with an artifact store in dir served on a loopback port. It returns the
// store and a stop function (also called at cleanup).
func startProgramOperator(t testing.TB, dir string) (*artifact.Store, func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	store := &artifact.Store{Dir: dir, BaseURL: "http://" + l.Addr().String()}
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{
		Scheme: operator.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: ctrlConfigUniqueNames(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&controller.ProgramReconciler{
		Client: mgr.GetClient(), Store: store, Recorder: mgr.GetEventRecorderFor("program-controller"),
	}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- store.Serve(ctx, l) }()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var stopped bool
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("artifact server: %v", err)
		}
	}
	t.Cleanup(stop)
	return store, stop
}

// programExprs builds Program expressions from name/value pairs.
func programExprs(kv ...any) map[string]apiextensionsv1.JSON {
	m := map[string]apiextensionsv1.JSON{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = *jsonValue(kv[i+1])
	}
	return m
}

// recordProgramSpec is a Program with one test-provider record, whose name
// comes from configuration (defaulted) and whose content is given.
func recordProgramSpec(content string) pulumiv1.ProgramSpec {
	return pulumiv1.ProgramSpec{
		Configuration: map[string]pulumiv1.Configuration{
			"recordName": {Type: "String", Default: jsonValue("program-record")},
		},
		Variables: programExprs("greeting", "hello from ${recordName}"),
		Resources: map[string]pulumiv1.Resource{
			"rec": {Type: "stackflowtest:index:Record", Properties: programExprs("name", "${recordName}", "content", content)},
		},
		Outputs: programExprs("content", "${rec.content}", "greeting", "${greeting}", "answer", 42),
	}
}

// waitArtifact waits until the Program's status describes an artifact of its
// current generation and returns that artifact.
func waitArtifact(t testing.TB, p *pulumiv1.Program, what string) *pulumiv1.Artifact {
	t.Helper()
	eventually(t, time.Minute, what, func() (bool, error) {
		if err := get(t, p); err != nil {
			return false, err
		}
		return p.Status.Artifact != nil && p.Status.ObservedGeneration == p.Generation,
			fmt.Errorf("generation %d, status %+v", p.Generation, p.Status)
	})
	return p.Status.Artifact
}

// artifactGet GETs a URL and returns the status code, headers and body.
func artifactGet(t testing.TB, url string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}

// checkArtifact downloads the artifact, checks its status fields, digest and
// size, and returns the files in the tarball.
func checkArtifact(t testing.TB, store *artifact.Store, p *pulumiv1.Program, a *pulumiv1.Artifact) map[string]string {
	t.Helper()
	hexsum, ok := strings.CutPrefix(a.Digest, "sha256:")
	if !ok || len(hexsum) != 64 {
		t.Fatalf("digest %q is not sha256:<hex>", a.Digest)
	}
	if want := fmt.Sprintf("programs/%s/%s/%s.tar.gz", p.Namespace, p.Name, hexsum); a.Path != want {
		t.Fatalf("path = %q, want %q", a.Path, want)
	}
	if a.URL != store.BaseURL+"/"+a.Path {
		t.Fatalf("url = %q, want %s/%s", a.URL, store.BaseURL, a.Path)
	}
	if want := fmt.Sprintf("%d/%s", p.Generation, a.Digest); a.Revision != want {
		t.Fatalf("revision = %q, want %q", a.Revision, want)
	}
	if a.LastUpdateTime.IsZero() {
		t.Fatal("lastUpdateTime not set")
	}
	code, hdr, body := artifactGet(t, a.URL)
	if code != http.StatusOK {
		t.Fatalf("GET %s: HTTP %d", a.URL, code)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/gzip" {
		t.Fatalf("Content-Type = %q", ct)
	}
	if got := artifact.Digest(body); got != a.Digest {
		t.Fatalf("downloaded digest %s, status says %s", got, a.Digest)
	}
	if a.Size == nil || *a.Size != int64(len(body)) {
		t.Fatalf("size = %v, downloaded %d bytes", a.Size, len(body))
	}
	gz, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = string(b)
	}
	return files
}

// upFetchedProgram fetches the artifact as a workspace agent does and runs `pulumi
// up` of it, returning the outputs and change counts.
func upFetchedProgram(t testing.TB, pe *substrate.Pulumi, a *pulumiv1.Artifact) (auto.OutputMap, map[string]int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fetched, err := agent.Fetch(ctx, agent.Source{ArtifactURL: a.URL, ArtifactDigest: a.Digest}, t.TempDir())
	if err != nil {
		t.Fatalf("fetch %s: %v", a.URL, err)
	}
	if fetched.Revision != a.Digest {
		t.Fatalf("fetched revision %q, want %q", fetched.Revision, a.Digest)
	}
	stack, err := auto.UpsertStackLocalSource(ctx, "dev", fetched.ProgramDir, auto.Pulumi(pe.Command(t)), auto.EnvVars(pe.EnvVars()))
	if err != nil {
		t.Fatalf("select stack in %s: %v", fetched.ProgramDir, err)
	}
	res, err := stack.Up(ctx)
	if err != nil {
		t.Fatalf("up of the fetched program: %v", err)
	}
	changes := map[string]int{}
	if res.Summary.ResourceChanges != nil {
		changes = *res.Summary.ResourceChanges
	}
	return res.Outputs, changes
}

// publishedEvents counts the Program's ArtifactPublished events.
func publishedEvents(t testing.TB, p *pulumiv1.Program) (int, error) {
	t.Helper()
	var list corev1.EventList
	if err := cp.Client.List(context.Background(), &list, client.InNamespace(p.Namespace)); err != nil {
		return 0, err
	}
	n := 0
	for _, ev := range list.Items {
		if ev.InvolvedObject.Kind == "Program" && ev.InvolvedObject.Name == p.Name && ev.Reason == controller.ProgramReasonArtifactPublished {
			n += int(max(ev.Count, 1))
		}
	}
	return n, nil
}

// TestProgramArtifactRunsAndFollowsEdits: a Program is published as a
// tarball whose digest and Pulumi.yaml match its status and spec; fetched as a
// workspace agent fetches it, it deploys the test provider's record for real;
// an edit publishes a new revision (the old artifact is pruned) that deploys
// the new content; a wrong digest or altered bytes fail the fetch; deleting the
// Program removes its artifacts.
func TestProgramArtifactRunsAndFollowsEdits(t *testing.T) {
	ns := cp.Namespace(t)
	pe := substrate.NewPulumi(t)
	store, _ := startProgramOperator(t, t.TempDir())
	ctx := context.Background()

	p := &pulumiv1.Program{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Program: recordProgramSpec("first")}
	if err := cp.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	a1 := waitArtifact(t, p, "the first artifact")
	if !slices.Contains(p.Finalizers, controller.ProgramFinalizer) {
		t.Fatalf("finalizers = %v", p.Finalizers)
	}
	files := checkArtifact(t, store, p, a1)
	if len(files) != 1 {
		t.Fatalf("tarball holds %d files, want Pulumi.yaml only", len(files))
	}
	project := files["Pulumi.yaml"]
	if !strings.HasPrefix(project, "name: web\nruntime: yaml\n") {
		t.Fatalf("Pulumi.yaml does not start with the name and runtime:\n%s", project)
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(project), &doc); err != nil {
		t.Fatalf("Pulumi.yaml: %v\n%s", err, project)
	}
	rec, _ := doc["resources"].(map[string]any)["rec"].(map[string]any)
	props, _ := rec["properties"].(map[string]any)
	conf, _ := doc["configuration"].(map[string]any)["recordName"].(map[string]any)
	outs, _ := doc["outputs"].(map[string]any)
	switch {
	case rec["type"] != "stackflowtest:index:Record", props["name"] != "${recordName}", props["content"] != "first":
		t.Fatalf("resources in Pulumi.yaml:\n%s", project)
	case conf["type"] != "String" || conf["default"] != "program-record":
		t.Fatalf("configuration in Pulumi.yaml:\n%s", project)
	case outs["answer"] != float64(42) || outs["content"] != "${rec.content}":
		t.Fatalf("outputs in Pulumi.yaml (42 must stay a number):\n%s", project)
	}
	if _, ok := doc["packages"]; ok {
		t.Fatalf("an empty section was rendered:\n%s", project)
	}

	// The artifact runs: fetched and verified like a workspace agent does,
	// then deployed by the real engine with the test provider.
	outputs, changes := upFetchedProgram(t, pe, a1)
	if changes["create"] != 2 { // stack + record
		t.Fatalf("first up changes = %v, want 2 creates", changes)
	}
	if got, _ := pe.Record(t, "program-record"); got != "first" {
		t.Fatalf("record = %q, want %q", got, "first")
	}
	if outputs["content"].Value != "first" || outputs["greeting"].Value != "hello from program-record" || outputs["answer"].Value != float64(42) {
		t.Fatalf("outputs = %+v", outputs)
	}

	// Edit the program: a new revision and digest; the old artifact goes.
	if err := get(t, p); err != nil {
		t.Fatal(err)
	}
	gen1 := p.Generation
	p.Program = recordProgramSpec("second")
	if err := cp.Client.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	if p.Generation == gen1 {
		t.Fatalf("an edit of .program did not change the generation (%d)", gen1)
	}
	a2 := waitArtifact(t, p, "the edited program's artifact")
	if a2.Digest == a1.Digest || a2.Revision == a1.Revision {
		t.Fatalf("edit kept digest %s / revision %s", a2.Digest, a2.Revision)
	}
	if a2.LastUpdateTime.Before(&a1.LastUpdateTime) {
		t.Fatalf("lastUpdateTime went back: %v → %v", a1.LastUpdateTime, a2.LastUpdateTime)
	}
	if files := checkArtifact(t, store, p, a2); !strings.Contains(files["Pulumi.yaml"], "content: second") {
		t.Fatalf("edited Pulumi.yaml:\n%s", files["Pulumi.yaml"])
	}
	eventually(t, 30*time.Second, "the old artifact to be pruned", func() (bool, error) {
		code, _, _ := artifactGet(t, a1.URL)
		return code == http.StatusNotFound, fmt.Errorf("GET %s: HTTP %d", a1.URL, code)
	})
	if _, err := os.Stat(filepath.Join(store.Dir, filepath.FromSlash(a1.Path))); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("old artifact file: %v", err)
	}
	_, changes = upFetchedProgram(t, pe, a2)
	if changes["update"] != 1 {
		t.Fatalf("up of the edited program: changes %v, want 1 update", changes)
	}
	if got, _ := pe.Record(t, "program-record"); got != "second" {
		t.Fatalf("record after the edit = %q, want %q", got, "second")
	}
	eventually(t, 30*time.Second, "two ArtifactPublished events", func() (bool, error) {
		n, err := publishedEvents(t, p)
		return n == 2, fmt.Errorf("%d events (%v)", n, err)
	})

	// A digest that does not match the bytes fails the fetch; so do bytes
	// altered on the server.
	wrong := []byte(a2.Digest)
	if wrong[len(wrong)-1] == '0' {
		wrong[len(wrong)-1] = '1'
	} else {
		wrong[len(wrong)-1] = '0'
	}
	_, err := agent.Fetch(ctx, agent.Source{ArtifactURL: a2.URL, ArtifactDigest: string(wrong)}, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "digest mismatch") {
		t.Fatalf("fetch with a tampered digest: %v, want a digest mismatch", err)
	}
	file := filepath.Join(store.Dir, filepath.FromSlash(a2.Path))
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, append(good[:len(good):len(good)], 0), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = agent.Fetch(ctx, agent.Source{ArtifactURL: a2.URL, ArtifactDigest: a2.Digest}, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "digest mismatch") {
		t.Fatalf("fetch of altered bytes: %v, want a digest mismatch", err)
	}

	// Deleting the Program removes its artifacts, then the Program.
	if err := cp.Client.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the program to be gone", func() (bool, error) {
		err := get(t, p)
		return apierrors.IsNotFound(err), err
	})
	if code, _, _ := artifactGet(t, a2.URL); code != http.StatusNotFound {
		t.Fatalf("GET %s after deletion: HTTP %d", a2.URL, code)
	}
	if _, err := os.Stat(filepath.Join(store.Dir, "programs", ns, "web")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("artifacts left after deletion: %v", err)
	}
}

// TestProgramArtifactRepublishedAfterRestart: an operator that starts with an
// empty artifact directory (a new pod's emptyDir) publishes every Program
// again at the same digest — Stacks see no new content, lastUpdateTime stays —
// and a same-content new generation changes only the revision.
func TestProgramArtifactRepublishedAfterRestart(t *testing.T) {
	ns := cp.Namespace(t)
	_, stop := startProgramOperator(t, t.TempDir())
	ctx := context.Background()
	p := &pulumiv1.Program{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"}, Program: recordProgramSpec("x")}
	if err := cp.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	a1 := waitArtifact(t, p, "the artifact")
	stop()

	store, _ := startProgramOperator(t, t.TempDir())
	eventually(t, time.Minute, "the artifact republished by the new operator", func() (bool, error) {
		if err := get(t, p); err != nil {
			return false, err
		}
		return p.Status.Artifact.URL == store.BaseURL+"/"+a1.Path, fmt.Errorf("url %s", p.Status.Artifact.URL)
	})
	a2 := p.Status.Artifact
	if a2.Digest != a1.Digest || a2.Revision != a1.Revision || !a2.LastUpdateTime.Equal(&a1.LastUpdateTime) {
		t.Fatalf("republished artifact %+v, before %+v", a2, a1)
	}
	checkArtifact(t, store, p, a2)

	// A new generation with the same program: same digest, new revision.
	p.Program = recordProgramSpec("y")
	if err := cp.Client.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	a3 := waitArtifact(t, p, "the changed artifact")
	p.Program = recordProgramSpec("x")
	if err := cp.Client.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	a4 := waitArtifact(t, p, "the artifact of the program changed back")
	if a4.Digest != a1.Digest || a4.Revision != fmt.Sprintf("%d/%s", p.Generation, a1.Digest) || a3.Digest == a1.Digest {
		t.Fatalf("changed back: %+v (first %+v, between %+v)", a4, a1, a3)
	}
	checkArtifact(t, store, p, a4)
}
