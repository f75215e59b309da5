package examples

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	argov1alpha1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

var environments = []string{"dev", "test", "prod"}

// waves is the sync wave of each file of an environment, in the order Argo
// CD must apply them.
var waves = []struct{ file, wave string }{
	{"rbac.yaml", "-2"}, {"config.yaml", "-1"}, {"stack.yaml", "0"}, {"after-stack.yaml", "1"},
}

const (
	syncWave           = "argocd.argoproj.io/sync-wave"
	resourcesFinalizer = "resources-finalizer.argocd.argoproj.io"
	authorizedStage    = "kargo.akuity.io/authorized-stage"
)

func envDir(env string) string { return filepath.Join(examplesDir(), "argocd", "environments", env) }

// TestEnvironmentSyncWaves: each environment holds exactly the four files,
// each object annotated with its file's wave, the waves strictly ordered
// rbac < config < stack < after-stack, and the Stack the first document of
// stack.yaml.
func TestEnvironmentSyncWaves(t *testing.T) {
	for _, env := range environments {
		entries, err := os.ReadDir(envDir(env))
		if err != nil {
			t.Fatal(err)
		}
		var files []string
		for _, e := range entries {
			files = append(files, e.Name())
		}
		var want []string
		for _, w := range waves {
			want = append(want, w.file)
		}
		slices.Sort(files)
		slices.Sort(want)
		if !slices.Equal(files, want) {
			t.Errorf("environments/%s holds %v, want %v", env, files, want)
		}
		prev := -1 << 31
		for _, w := range waves {
			n := mustAtoi(t, w.wave)
			if n <= prev {
				t.Fatalf("the waves table is not ordered at %s", w.file)
			}
			prev = n
			docs := readDocs(t, filepath.Join(envDir(env), w.file))
			if len(docs) == 0 {
				t.Errorf("environments/%s/%s has no object", env, w.file)
			}
			for _, o := range docs {
				if got := str(o.obj, "metadata", "annotations", syncWave); got != w.wave {
					t.Errorf("%s: %s is %q, want %q (rbac -2 < config -1 < stack 0 < after-stack 1)", o, syncWave, got, w.wave)
				}
			}
		}
		docs := readDocs(t, filepath.Join(envDir(env), "stack.yaml"))
		if len(docs) == 0 || docs[0].doc != 1 || docs[0].kind() != "Stack" || docs[0].name() != "web-"+env {
			t.Errorf("environments/%s/stack.yaml: the Stack web-%s must be the first document (Kargo's yaml-update edits only that one)", env, env)
		}
	}
}

func mustAtoi(t testing.TB, s string) int {
	t.Helper()
	var n int
	if err := json.Unmarshal([]byte(s), &n); err != nil {
		t.Fatalf("%q is not a number", s)
	}
	return n
}

// envObject finds the object of a kind and name in an environment.
func envObject(t testing.TB, env, kind, name string) map[string]any {
	t.Helper()
	for _, w := range waves {
		for _, o := range readDocs(t, filepath.Join(envDir(env), w.file)) {
			if o.kind() == kind && o.name() == name {
				return o.obj
			}
		}
	}
	return nil
}

// TestEnvironmentStacks: the Stacks are what the walk-through describes, and
// what they refer to is shipped in the same environment (and wave before).
func TestEnvironmentStacks(t *testing.T) {
	greetings := map[string]string{}
	for _, env := range environments {
		st := envObject(t, env, "Stack", "web-"+env)
		if st == nil {
			t.Fatalf("environments/%s: no Stack web-%s", env, env)
		}
		spec := st["spec"].(map[string]any)
		check := func(what string, got, want any) {
			t.Helper()
			if string(mustJSON(t, got)) != string(mustJSON(t, want)) {
				t.Errorf("Stack web-%s: %s = %s, want %s", env, what, mustJSON(t, got), mustJSON(t, want))
			}
		}
		check("namespace", str(st, "metadata", "namespace"), "infra")
		check("stack", spec["stack"], env)
		check("projectRepo", spec["projectRepo"], "https://github.com/example-org/infra.git")
		check("repoDir", spec["repoDir"], "programs/web")
		check("refresh", spec["refresh"], true)
		check("envRefs", spec["envRefs"], map[string]any{"PULUMI_ACCESS_TOKEN": map[string]any{"type": "Secret", "secret": map[string]any{"name": "pulumi-api", "key": "accessToken"}}})
		switch env {
		case "dev":
			check("branch", spec["branch"], "main")
			check("destroyOnFinalize", spec["destroyOnFinalize"], true)
			check("prerequisites", spec["prerequisites"], nil)
		default:
			prev := map[string]string{"test": "dev", "prod": "test"}[env]
			check("destroyOnFinalize", spec["destroyOnFinalize"], nil)
			check("branch", spec["branch"], nil)
			if c, _ := spec["commit"].(string); !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(c) {
				t.Errorf("Stack web-%s: commit %q is not a full SHA", env, c)
			}
			check("prerequisites", spec["prerequisites"], []any{map[string]any{"name": "web-" + prev, "requirement": map[string]any{"succeededWithinDuration": "24h"}}})
			// The prerequisite is a Stack of the same namespace.
			if p := envObject(t, prev, "Stack", "web-"+prev); p == nil || str(p, "metadata", "namespace") != str(st, "metadata", "namespace") {
				t.Errorf("Stack web-%s: its prerequisite web-%s is not a Stack of namespace %s", env, prev, str(st, "metadata", "namespace"))
			}
		}
		sa := str(st, "spec", "workspaceTemplate", "spec", "serviceAccountName")
		check("serviceAccountName", sa, "web-"+env)
		if envObject(t, env, "ServiceAccount", sa) == nil {
			t.Errorf("environments/%s: no ServiceAccount %s for the Stack's workspace", env, sa)
		}
		rb := envObject(t, env, "RoleBinding", sa)
		if rb == nil || str(rb, "roleRef", "kind") != "Role" || envObject(t, env, "Role", str(rb, "roleRef", "name")) == nil ||
			len(list(rb, "subjects")) != 1 || str(list(rb, "subjects")[0], "name") != sa {
			t.Errorf("environments/%s: the RoleBinding %s must bind the environment's own Role to %s only", env, sa, sa)
		}
		for name, ref := range field(st, "spec", "configRef").(map[string]any) {
			cm := envObject(t, env, "ConfigMap", str(ref.(map[string]any), "name"))
			if cm == nil || str(cm, "data", str(ref.(map[string]any), "key")) == "" {
				t.Errorf("Stack web-%s: configRef %s names %v, which config.yaml does not hold", env, name, ref)
				continue
			}
			greetings[env] = str(cm, "data", "greeting")
		}
		if envObject(t, env, "ConfigMap", "web-"+env+"-released") == nil {
			t.Errorf("environments/%s/after-stack.yaml: no ConfigMap web-%s-released", env, env)
		}
	}
	if len(greetings) != 3 || greetings["dev"] == greetings["test"] || greetings["test"] == greetings["prod"] || greetings["dev"] == greetings["prod"] {
		t.Errorf("greetings %v: want one per environment, all different", greetings)
	}
}

// application is an Argo CD Application of the examples, with the example
// directory its source path is relative to (the manifests repository
// mirrors it).
type application struct {
	obj     object
	app     argov1alpha1.Application
	rootDir string
}

func decodeStrict(t testing.TB, o object, into any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(mustJSON(t, o.obj))))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s: %v", o, err)
	}
}

// applications are the Applications of both examples and the template of
// the PR preview ApplicationSet.
func applications(t testing.TB) []application {
	t.Helper()
	var out []application
	objs := exampleObjects(t)
	for _, ex := range []struct{ dir, root string }{
		{"argocd", filepath.Join(examplesDir(), "argocd")},
		{"kargo", filepath.Join(examplesDir(), "kargo", "manifests")},
	} {
		for _, o := range byKind(objectsUnder(objs, ex.dir), "Application") {
			a := application{obj: o, rootDir: ex.root}
			decodeStrict(t, o, &a.app)
			out = append(out, a)
		}
		for _, o := range byKind(objectsUnder(objs, ex.dir), "ApplicationSet") {
			var set argov1alpha1.ApplicationSet
			decodeStrict(t, o, &set)
			a := application{obj: o, rootDir: ex.root}
			a.app.Name, a.app.Namespace, a.app.Finalizers = set.Spec.Template.Name, set.Spec.Template.Namespace, set.Spec.Template.Finalizers
			a.app.Annotations, a.app.Spec = set.Spec.Template.Annotations, set.Spec.Template.Spec
			out = append(out, a)
		}
	}
	if len(out) != 3+1+4 {
		t.Fatalf("%d Applications and ApplicationSet templates, want 8 (3 environments, the PR preview, 4 Kargo Stages)", len(out))
	}
	return out
}

// sourceObjects are the objects an Application's source yields (its path in
// the example, rendered with kustomize when it has a kustomization).
func (a application) sourceObjects(t testing.TB) []object {
	t.Helper()
	dir := filepath.Join(a.rootDir, filepath.FromSlash(a.app.Spec.Source.Path))
	if _, err := os.Stat(filepath.Join(dir, "kustomization.yaml")); err == nil {
		return kustomizeBuild(t, dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("%s: source path %s does not exist in %s: %v", a.obj, a.app.Spec.Source.Path, rel(a.rootDir), err)
	}
	var out []object
	for _, e := range entries {
		if isYAML(e.Name()) {
			out = append(out, readDocs(t, filepath.Join(dir, e.Name()))...)
		}
	}
	if len(out) == 0 {
		t.Errorf("%s: source path %s holds no object", a.obj, a.app.Spec.Source.Path)
	}
	return out
}

// TestApplications: every Application (and the ApplicationSet's template)
// carries the resources finalizer, ServerSideApply=true, a source path that
// exists in its example, and an AppProject of the examples that, by Argo CD's
// own checks, permits its source, its destination, and every kind and
// namespace its path holds (and the Namespace, when CreateNamespace=true).
func TestApplications(t *testing.T) {
	projects := map[string]argov1alpha1.AppProject{}
	for _, o := range byKind(exampleObjects(t), "AppProject") {
		var p argov1alpha1.AppProject
		decodeStrict(t, o, &p)
		projects[p.Name] = p
	}
	noClusters := func(string) ([]*argov1alpha1.Cluster, error) { return nil, nil }
	for _, a := range applications(t) {
		spec := a.app.Spec
		if !slices.Contains(a.app.Finalizers, resourcesFinalizer) {
			t.Errorf("%s: no finalizer %s (deleting the Application would orphan the Stacks)", a.obj, resourcesFinalizer)
		}
		if spec.SyncPolicy == nil || !spec.SyncPolicy.SyncOptions.HasOption("ServerSideApply=true") {
			t.Errorf("%s: no ServerSideApply=true", a.obj)
		}
		if a.app.Namespace != "argocd" {
			t.Errorf("%s: in namespace %q, want argocd", a.obj, a.app.Namespace)
		}
		if spec.Source == nil {
			t.Errorf("%s: no single source", a.obj)
			continue
		}
		proj, ok := projects[spec.Project]
		if !ok {
			t.Errorf("%s: project %q is not an AppProject of the examples (%v)", a.obj, spec.Project, keys(projects))
			continue
		}
		if !proj.IsSourcePermitted(*spec.Source) {
			t.Errorf("%s: the project %s does not permit the source %s", a.obj, proj.Name, spec.Source.RepoURL)
		}
		if ok, err := proj.IsDestinationPermitted(spec.Destination, noClusters); err != nil || !ok {
			t.Errorf("%s: the project %s does not permit the destination %+v (%v)", a.obj, proj.Name, spec.Destination, err)
		}
		createNS := spec.SyncPolicy != nil && spec.SyncPolicy.SyncOptions.HasOption("CreateNamespace=true")
		if createNS && !proj.IsGroupKindPermitted(schema.GroupKind{Kind: "Namespace"}, false) {
			t.Errorf("%s: CreateNamespace=true, but the project %s does not whitelist the cluster-scoped Namespace: the sync would fail", a.obj, proj.Name)
		}
		for _, o := range a.sourceObjects(t) {
			gk := schema.FromAPIVersionAndKind(str(o.obj, "apiVersion"), o.kind()).GroupKind()
			namespaced := o.kind() != "Namespace"
			if !proj.IsGroupKindPermitted(gk, namespaced) {
				t.Errorf("%s (synced by %s): the project %s does not permit %s", o, a.app.Name, proj.Name, gk)
			}
			ns := o.namespace()
			if ns == "" {
				ns = spec.Destination.Namespace
			}
			if ns != spec.Destination.Namespace {
				t.Errorf("%s (synced by %s): namespace %s, the Application's destination is %s", o, a.app.Name, ns, spec.Destination.Namespace)
			}
			if ok, err := proj.IsDestinationPermitted(argov1alpha1.ApplicationDestination{Server: spec.Destination.Server, Namespace: ns}, noClusters); err != nil || !ok {
				t.Errorf("%s (synced by %s): the project %s does not permit namespace %s", o, a.app.Name, proj.Name, ns)
			}
		}
	}
}

// TestEnvironmentApplications: infra-<env> syncs environments/<env> of the
// manifests repository at main, automated (prune, selfHeal), creating the
// namespace with the restricted Pod Security label.
func TestEnvironmentApplications(t *testing.T) {
	byName := map[string]application{}
	for _, a := range applications(t) {
		byName[a.app.Name] = a
	}
	for _, env := range environments {
		a, ok := byName["infra-"+env]
		if !ok {
			t.Errorf("no Application infra-%s", env)
			continue
		}
		s := a.app.Spec
		if a.obj.file != "examples/argocd/applications/"+env+".yaml" || s.Project != "stackflow" || s.Source.RepoURL != "https://github.com/example-org/infra-manifests.git" ||
			s.Source.TargetRevision != "main" || s.Source.Path != "environments/"+env || s.Destination.Namespace != "infra" || s.Destination.Server != "https://kubernetes.default.svc" {
			t.Errorf("%s: project %s, source %+v, destination %+v", a.obj, s.Project, s.Source, s.Destination)
		}
		sp := s.SyncPolicy
		if sp == nil || sp.Automated == nil || !sp.Automated.Prune || !sp.Automated.SelfHeal {
			t.Errorf("%s: want an automated sync with prune and selfHeal", a.obj)
		}
		if sp == nil || !sp.SyncOptions.HasOption("CreateNamespace=true") || sp.ManagedNamespaceMetadata == nil ||
			sp.ManagedNamespaceMetadata.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
			t.Errorf("%s: want CreateNamespace=true and the namespace labelled pod-security.kubernetes.io/enforce: restricted", a.obj)
		}
	}
}

// TestKargoApplicationsAuthorizeTheirStage: one Application kargo-demo-<stage>
// per Stage, authorizing exactly that Stage.
func TestKargoApplicationsAuthorizeTheirStage(t *testing.T) {
	stages := map[string]bool{}
	for _, st := range byKind(kargoObjects(t), "Stage") {
		stages[st.name()] = true
	}
	seen := map[string]bool{}
	for _, a := range applications(t) {
		if !strings.HasPrefix(a.obj.file, "examples/kargo/") {
			continue
		}
		got := a.app.Annotations[authorizedStage]
		project, stage, _ := strings.Cut(got, ":")
		if project != kargoProject || !stages[stage] || a.app.Name != kargoProject+"-"+stage {
			t.Errorf("%s: %s %q, want %s:<stage> of a Stage (%v) and the name %s-<stage>", a.obj, authorizedStage, got, kargoProject, keys(stages), kargoProject)
		}
		seen[stage] = true
	}
	for st := range stages {
		if !seen[st] {
			t.Errorf("Stage %s has no Application", st)
		}
	}
}

// readme reads an example's README.
func readme(t testing.TB, example string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(examplesDir(), example, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestREADMEsNameEveryFile: each example's README names every file the
// example ships, by its path in the example (a per-environment or per-Stage
// file may be named with <env> or <stage>).
func TestREADMEsNameEveryFile(t *testing.T) {
	generic := regexp.MustCompile(`^(environments|manifests)/(dev|test|prod|preview)/`)
	for _, example := range []string{"argocd", "kargo", "chain"} {
		text := readme(t, example)
		root := filepath.Join(examplesDir(), example)
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() == "README.md" {
				return err
			}
			r, _ := filepath.Rel(root, path)
			r = filepath.ToSlash(r)
			names := []string{r}
			if m := generic.FindStringSubmatch(r); m != nil {
				names = append(names, generic.ReplaceAllString(r, m[1]+"/<env>/"), generic.ReplaceAllString(r, m[1]+"/<stage>/"))
			}
			if r2 := regexp.MustCompile(`^applications/(dev|test|prod)\.yaml$`); r2.MatchString(r) {
				names = append(names, "applications/<env>.yaml")
			}
			for _, n := range names {
				if strings.Contains(text, n) {
					return nil
				}
			}
			t.Errorf("examples/%s/README.md does not mention %s", example, strings.Join(names, " or "))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// repoPath finds repository paths in a README: in backquotes, in commands
// (`kubectl apply -k analysis/config/default`), in tables.
var repoPath = regexp.MustCompile("(?:^|[\\s`(|])((?:operator|analysis|argocd-health|kargo-steps)/[A-Za-z0-9_./-]*[A-Za-z0-9_-])")
var mdLink = regexp.MustCompile(`\]\(([^)#\s]+)(?:#[^)]*)?\)`)

// TestREADMEPathsExist: the repository paths the READMEs give (install
// commands, references) exist, the ones a platform engineer needs are given,
// and every relative link resolves inside the repository.
func TestREADMEPathsExist(t *testing.T) {
	required := map[string][]string{
		"argocd": {"operator/config/default", "argocd-health/install/kustomize", "argocd-health/install/helm/values.yaml",
			"analysis/config/default", "analysis/config/templates"},
		"kargo": {"operator/config/default", "argocd-health/install/kustomize", "analysis/config/default", "analysis/config/templates",
			"analysis/config/kargo-project", "kargo-steps/config/tasks"},
	}
	root := substrate.RepoRoot()
	for example, paths := range required {
		text := readme(t, example)
		for _, p := range paths {
			if !strings.Contains(text, "`"+p) && !strings.Contains(text, p+"`") && !strings.Contains(text, " "+p) {
				t.Errorf("examples/%s/README.md does not give %s", example, p)
			}
		}
		for _, m := range repoPath.FindAllStringSubmatch(text, -1) {
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(m[1]))); err != nil {
				t.Errorf("examples/%s/README.md names %s, which does not exist", example, m[1])
			}
		}
		dir := filepath.Join(examplesDir(), example)
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			abs := filepath.Clean(filepath.Join(dir, filepath.FromSlash(target)))
			if r, err := filepath.Rel(root, abs); err != nil || strings.HasPrefix(r, "..") {
				t.Errorf("examples/%s/README.md links to %s, outside the repository", example, target)
				continue
			}
			if _, err := os.Stat(abs); err != nil {
				t.Errorf("examples/%s/README.md links to %s, which does not exist", example, target)
			}
		}
	}
}
