package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/artifact"
)

func progJSON(s string) *apiextensionsv1.JSON { return &apiextensionsv1.JSON{Raw: []byte(s)} }

// progExprs builds expressions from name/JSON pairs.
func progExprs(kv ...string) map[string]apiextensionsv1.JSON {
	m := map[string]apiextensionsv1.JSON{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = *progJSON(kv[i+1])
	}
	return m
}

// sameJSONValues reports whether two JSON documents hold the same values, types
// included.
func sameJSONValues(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

func TestRenderProject(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec pulumiv1.ProgramSpec
		// want is the project as JSON: reading the rendered YAML back (with
		// YAML 1.1 rules, stricter than Pulumi's YAML 1.2 about which plain
		// strings become booleans) must give exactly these values and types.
		want string
		// lines must appear in the YAML as written.
		lines []string
	}{{
		name: "empty program",
		want: `{"name":"web","runtime":"yaml"}`,
	}, {
		name: "empty sections are omitted",
		spec: pulumiv1.ProgramSpec{
			Configuration: map[string]pulumiv1.Configuration{}, Resources: map[string]pulumiv1.Resource{},
			Variables: progExprs(), Outputs: progExprs(), Packages: map[string]string{},
		},
		want: `{"name":"web","runtime":"yaml"}`,
	}, {
		name: "configuration with typed defaults",
		spec: pulumiv1.ProgramSpec{Configuration: map[string]pulumiv1.Configuration{
			"recordName": {Type: "String", Default: progJSON(`"rec"`)},
			"replicas":   {Type: "Number", Default: progJSON(`3`)},
			"zones":      {Type: "List<String>", Default: progJSON(`["a","b"]`)},
			"required":   {Type: "String"},
		}},
		want: `{"name":"web","runtime":"yaml","configuration":{
			"recordName":{"type":"String","default":"rec"},
			"replicas":{"type":"Number","default":3},
			"zones":{"type":"List<String>","default":["a","b"]},
			"required":{"type":"String"}}}`,
		lines: []string{"    default: 3\n"},
	}, {
		name: "resource properties keep their JSON types",
		spec: pulumiv1.ProgramSpec{Resources: map[string]pulumiv1.Resource{
			"rec": {Type: "stackflowtest:index:Record", Properties: progExprs(
				"name", `"${recordName}"`,
				"count", `3`,
				"ratio", `0.5`,
				"big", `9007199254740993`,
				"enabled", `true`,
				"boolString", `"true"`,
				"yesString", `"yes"`,
				"numberString", `"3"`,
				"nullString", `"null"`,
				"empty", `""`,
				"nothing", `null`,
				"multiline", `"line 1\nline 2\n"`,
				"nested", `{"list":[1,"two",{"three":false}],"fn::secret":"s"}`,
			)},
		}},
		want: `{"name":"web","runtime":"yaml","resources":{"rec":{"type":"stackflowtest:index:Record","properties":{
			"name":"${recordName}","count":3,"ratio":0.5,"big":9007199254740993,"enabled":true,
			"boolString":"true","yesString":"yes","numberString":"3","nullString":"null","empty":"","nothing":null,
			"multiline":"line 1\nline 2\n",
			"nested":{"list":[1,"two",{"three":false}],"fn::secret":"s"}}}}}`,
		lines: []string{"      count: 3\n", "      enabled: true\n", "      big: 9007199254740993\n"},
	}, {
		name: "options, get, variables, outputs and packages",
		spec: pulumiv1.ProgramSpec{
			Resources: map[string]pulumiv1.Resource{
				"bucket": {Type: "aws:s3:Bucket", Options: &pulumiv1.Options{
					Protect: true, DependsOn: []apiextensionsv1.JSON{*progJSON(`"${rec}"`)}, IgnoreChanges: []string{"tags"},
					CustomTimeouts: &pulumiv1.CustomTimeouts{Create: "5m"}, Version: "6.0.0",
				}},
				"existing": {Type: "aws:s3:Bucket", Get: &pulumiv1.Getter{Id: "my-bucket"}},
			},
			Variables: progExprs("ami", `{"fn::invoke":{"function":"aws:ec2:getAmi","arguments":{"mostRecent":true},"return":"id"}}`),
			Outputs:   progExprs("url", `"${bucket.websiteEndpoint}"`, "count", `2`),
			Packages:  map[string]string{"aws": "6.0.0"},
		},
		want: `{"name":"web","runtime":"yaml",
			"resources":{
				"bucket":{"type":"aws:s3:Bucket","options":{"protect":true,"dependsOn":["${rec}"],"ignoreChanges":["tags"],
					"customTimeouts":{"create":"5m"},"version":"6.0.0"}},
				"existing":{"type":"aws:s3:Bucket","get":{"id":"my-bucket"}}},
			"variables":{"ami":{"fn::invoke":{"function":"aws:ec2:getAmi","arguments":{"mostRecent":true},"return":"id"}}},
			"outputs":{"url":"${bucket.websiteEndpoint}","count":2},
			"packages":{"aws":"6.0.0"}}`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := &pulumiv1.Program{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}, Program: tc.spec}
			out, err := renderProject(p)
			if err != nil {
				t.Fatal(err)
			}
			back, err := yaml.YAMLToJSON(out)
			if err != nil {
				t.Fatalf("rendered YAML does not parse: %v\n%s", err, out)
			}
			if !sameJSONValues(t, back, []byte(tc.want)) {
				t.Fatalf("rendered\n%s\nreads back as %s\nwant %s", out, back, tc.want)
			}
			if !bytes.HasPrefix(out, []byte("name: web\nruntime: yaml\n")) {
				t.Errorf("rendered YAML does not start with the name and runtime:\n%s", out)
			}
			for _, l := range tc.lines {
				if !bytes.Contains(out, []byte(l)) {
					t.Errorf("rendered YAML lacks %q:\n%s", l, out)
				}
			}
		})
	}
}

func TestRenderProjectIsDeterministic(t *testing.T) {
	p := &pulumiv1.Program{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Program: pulumiv1.ProgramSpec{
		Resources: map[string]pulumiv1.Resource{},
		Outputs:   progExprs(),
	}}
	for i := range 50 {
		k := string(rune('a' + i%26))
		p.Program.Resources[k+"rec"] = pulumiv1.Resource{Type: "t:i:R", Properties: progExprs("a", `1`, "b", `"x"`, "c", `[1,2]`)}
		p.Program.Outputs[k] = *progJSON(`"${` + k + `rec.a}"`)
	}
	var first string
	for i := range 20 {
		out, err := renderProject(p.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		tgz, err := artifact.TarGz(map[string][]byte{projectFileName: out})
		if err != nil {
			t.Fatal(err)
		}
		d := artifact.Digest(tgz)
		if i == 0 {
			first = d
		} else if d != first {
			t.Fatalf("render %d gave digest %s, first %s", i, d, first)
		}
	}
}

// programEnv is a Program reconciler on a fake client with an injected clock.
type programEnv struct {
	r      *ProgramReconciler
	c      client.Client
	events *record.FakeRecorder
	now    time.Time
}

func newProgramEnv(t *testing.T, dir string, objs ...client.Object) *programEnv {
	t.Helper()
	s := runtime.NewScheme()
	if err := pulumiv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&pulumiv1.Program{}).WithObjects(objs...).Build()
	e := &programEnv{c: c, events: record.NewFakeRecorder(100), now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	e.r = &ProgramReconciler{Client: c, Recorder: e.events,
		Store: &artifact.Store{Dir: dir, BaseURL: "http://artifacts:9090"},
		Now:   func() time.Time { return e.now }}
	return e
}

func (e *programEnv) reconcile(t *testing.T, p *pulumiv1.Program) error {
	t.Helper()
	_, err := e.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
	if gerr := e.c.Get(context.Background(), client.ObjectKeyFromObject(p), p); gerr != nil && !apierrors.IsNotFound(gerr) {
		t.Fatal(gerr)
	}
	return err
}

// drainEvents returns the events recorded since the last call.
func (e *programEnv) drainEvents() []string { return recordedEvents(e.events) }

// progRecordSpec is a program with one test-provider record of the given content.
func progRecordSpec(content string) pulumiv1.ProgramSpec {
	return pulumiv1.ProgramSpec{
		Resources: map[string]pulumiv1.Resource{"rec": {Type: "stackflowtest:index:Record",
			Properties: progExprs("name", `"rec"`, "content", `"`+content+`"`)}},
		Outputs: progExprs("content", `"${rec.content}"`),
	}
}

func TestProgramReconcileLifecycle(t *testing.T) {
	dir := t.TempDir()
	p := &pulumiv1.Program{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Generation: 1}, Program: progRecordSpec("first")}
	e := newProgramEnv(t, dir, p)

	// First reconcile: finalizer, artifact on disk, status, event.
	if err := e.reconcile(t, p); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Finalizers, []string{ProgramFinalizer}) {
		t.Fatalf("finalizers = %v", p.Finalizers)
	}
	a1 := p.Status.Artifact
	if a1 == nil || p.Status.ObservedGeneration != 1 {
		t.Fatalf("status = %+v", p.Status)
	}
	hex1 := strings.TrimPrefix(a1.Digest, "sha256:")
	if a1.Path != "programs/ns/web/"+hex1+".tar.gz" || a1.URL != "http://artifacts:9090/"+a1.Path ||
		a1.Revision != "1/"+a1.Digest || !a1.LastUpdateTime.Time.Equal(e.now) {
		t.Fatalf("artifact = %+v", a1)
	}
	stored, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(a1.Path)))
	if err != nil {
		t.Fatal(err)
	}
	if artifact.Digest(stored) != a1.Digest || a1.Size == nil || *a1.Size != int64(len(stored)) {
		t.Fatalf("stored artifact: digest %s size %d, status %+v", artifact.Digest(stored), len(stored), a1)
	}
	if ev := e.drainEvents(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Normal ArtifactPublished Published revision 1/sha256:") {
		t.Fatalf("events = %q", ev)
	}

	// Nothing changed: same status, no event.
	e.now = e.now.Add(time.Hour)
	if err := e.reconcile(t, p); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Status.Artifact, a1) {
		t.Fatalf("status changed without a change: %+v → %+v", a1, p.Status.Artifact)
	}
	if ev := e.drainEvents(); len(ev) != 0 {
		t.Fatalf("events without a change: %q", ev)
	}

	// New content: new digest and revision, the old artifact pruned.
	p.Program = progRecordSpec("second")
	p.Generation = 2
	if err := e.c.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if err := e.reconcile(t, p); err != nil {
		t.Fatal(err)
	}
	a2 := p.Status.Artifact
	if a2.Digest == a1.Digest || a2.Revision != "2/"+a2.Digest || !a2.LastUpdateTime.Time.Equal(e.now) || p.Status.ObservedGeneration != 2 {
		t.Fatalf("after a content change: %+v (before %+v)", a2, a1)
	}
	if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(a1.Path))); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("old artifact not pruned: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(a2.Path))); err != nil {
		t.Fatalf("new artifact: %v", err)
	}
	if ev := e.drainEvents(); len(ev) != 1 || !strings.Contains(ev[0], "ArtifactPublished Published revision 2/"+a2.Digest) {
		t.Fatalf("events = %q", ev)
	}

	// A new generation with the same content: new revision, same digest,
	// lastUpdateTime kept, no event.
	p.Generation = 3
	if err := e.c.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	e.now = e.now.Add(time.Hour)
	if err := e.reconcile(t, p); err != nil {
		t.Fatal(err)
	}
	a3 := p.Status.Artifact
	if a3.Digest != a2.Digest || a3.Revision != "3/"+a2.Digest || !a3.LastUpdateTime.Equal(&a2.LastUpdateTime) || p.Status.ObservedGeneration != 3 {
		t.Fatalf("same content, new generation: %+v (before %+v)", a3, a2)
	}
	if ev := e.drainEvents(); len(ev) != 0 {
		t.Fatalf("events without a content change: %q", ev)
	}

	// Deletion: artifacts removed, finalizer released, object gone.
	if err := e.c.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if err := e.reconcile(t, p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "programs", "ns", "web")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("artifacts left after deletion: %v", err)
	}
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(p), &pulumiv1.Program{}); !apierrors.IsNotFound(err) {
		t.Fatalf("program still there after its finalizer: %v", err)
	}
}

func TestProgramReconcileStoreFailure(t *testing.T) {
	// The store's directory is a file: publishing fails, the error is
	// returned (backoff applies) and no status is written.
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p := &pulumiv1.Program{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Generation: 1}, Program: progRecordSpec("x")}
	e := newProgramEnv(t, file, p)
	err := e.reconcile(t, p)
	if err == nil || !strings.Contains(err.Error(), "publish artifact") {
		t.Fatalf("reconcile = %v, want a publish error", err)
	}
	if p.Status.Artifact != nil || p.Status.ObservedGeneration != 0 {
		t.Fatalf("status written after a failure: %+v", p.Status)
	}
}

func TestProgramReconcileMissing(t *testing.T) {
	e := newProgramEnv(t, t.TempDir())
	if err := e.reconcile(t, &pulumiv1.Program{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gone"}}); err != nil {
		t.Fatalf("reconcile of a missing program: %v", err)
	}
}

// TestFollowerServesPublishedPrograms: a replica that did not publish a
// Program's artifact (an empty store, as a follower has) serves the same bytes
// at the URL the publishing replica recorded, rendered from the Program it
// reads; a changed, missing or deleting Program is 404 there.
func TestFollowerServesPublishedPrograms(t *testing.T) {
	p := &pulumiv1.Program{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Generation: 1}, Program: progRecordSpec("first")}
	leaderDir := t.TempDir()
	e := newProgramEnv(t, leaderDir, p)
	if err := e.reconcile(t, p); err != nil {
		t.Fatal(err)
	}
	published, err := os.ReadFile(filepath.Join(leaderDir, filepath.FromSlash(p.Status.Artifact.Path)))
	if err != nil {
		t.Fatal(err)
	}
	follower := &artifact.Store{Dir: t.TempDir(), Render: ProgramArtifactRenderer(e.c)}
	srv := httptest.NewServer(follower.Handler())
	defer srv.Close()
	fetch := func(path string) (int, []byte) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/" + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b
	}
	first := p.Status.Artifact.Path
	if code, b := fetch(first); code != http.StatusOK || !bytes.Equal(b, published) {
		t.Fatalf("follower: GET %s: HTTP %d, %d bytes; want 200 and the %d published bytes", first, code, len(b), len(published))
	}
	// Another kind with the same namespace, name and digest is not a Program.
	if code, _ := fetch(strings.Replace(first, "programs/", "other/", 1)); code != http.StatusNotFound {
		t.Fatalf("follower: another kind: HTTP %d, want 404", code)
	}

	// The spec changed and the leader has not published yet: the old URL is
	// the leader's alone, and the new content is served once published.
	p.Program = progRecordSpec("second")
	if err := e.c.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if code, b := fetch(first); code != http.StatusNotFound {
		t.Fatalf("follower: artifact of an older spec: HTTP %d %q, want 404", code, b)
	}
	if err := e.reconcile(t, p); err != nil {
		t.Fatal(err)
	}
	if code, _ := fetch(p.Status.Artifact.Path); code != http.StatusOK {
		t.Fatalf("follower: the new artifact: HTTP %d, want 200", code)
	}

	// Deleting (finalizer held) and then gone.
	if err := e.c.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if code, _ := fetch(p.Status.Artifact.Path); code != http.StatusNotFound {
		t.Fatalf("follower: artifact of a deleting program: HTTP %d, want 404", code)
	}
	if err := e.reconcile(t, p); err != nil {
		t.Fatal(err)
	}
	if code, _ := fetch(p.Status.Artifact.Path); code != http.StatusNotFound {
		t.Fatalf("follower: artifact of a deleted program: HTTP %d, want 404", code)
	}
}
