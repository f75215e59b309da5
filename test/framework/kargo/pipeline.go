package kargo

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/stackflow-io/stackflow/analysis/tokensecret"
	"github.com/stackflow-io/stackflow/test/framework/fakegithub"
	"github.com/stackflow-io/stackflow/test/framework/hostproxy"
)

// The hosts the example's pipeline reaches by name, served through the host
// proxy: the GitHub Enterprise server holding the manifests repository
// (Kargo picks its GitHub provider for a host containing "github"), and the
// analysis service's in-cluster address, which the shipped task and
// templates default to.
const (
	GitHubHost   = "github.stackflow.test"
	AnalysisHost = "stackflow-analysis.stackflow-system.svc:8080"
)

// The manifests repository of the example, on the GitHub server.
const (
	ManifestsOwner = "example-org"
	ManifestsRepo  = "kargo-demo-manifests"
)

// PipelineOptions set up examples/kargo on a running Kargo, Argo CD and
// Argo Rollouts.
type PipelineOptions struct {
	// Client and Config reach the control plane (as an administrator).
	Client client.Client
	Config *rest.Config
	// RepoRoot is the Stackflow repository.
	RepoRoot string
	// Dir holds the GitHub server's repositories.
	Dir string
	// Proxy serves GitHubHost and AnalysisHost to Kargo, Argo CD and Argo
	// Rollouts (their http_proxy).
	Proxy *hostproxy.Proxy
	// ProgramURL is the program repository the Warehouse subscribes to
	// (served on loopback, public).
	ProgramURL string
	// AnalysisAddr is the analysis service's loopback address.
	AnalysisAddr string
	// GitHubToken is the one token the GitHub server accepts: the password
	// of Kargo's git credentials and of Argo CD's repository.
	GitHubToken string
	// RetryCap is ExampleOptions.RetryCap.
	RetryCap int64
	// Manifests are files (path → content) seeded in the manifests
	// repository besides the example's manifests/, for a test's own Stages.
	Manifests map[string]string
	// Say, when set, narrates the set-up.
	Say func(format string, args ...any)
}

// Pipeline is examples/kargo, set up.
type Pipeline struct {
	// Namespace is the Kargo project's namespace.
	Namespace string
	// GitHub holds the manifests repository.
	GitHub *fakegithub.Server
	// ManifestsURL is its clone URL.
	ManifestsURL string
	// Example is what was applied.
	Example *Example

	c client.Client
}

// StartPipeline applies what the example's walk-through has a cluster
// administrator and a project owner apply, unmodified but for the repository
// URLs (and RetryCap): the ClusterRole stackflow-stack-verifier, the
// ClusterAnalysisTemplates, the ClusterPromotionTasks, the Stacks' namespace
// with the Pulumi token Secret its Stacks name (the file backend does not
// read it), Argo CD's repository (through the proxy) and the
// example's AppProject and Applications, the Project (Kargo creates its
// namespace), the git credentials, and the project's objects but the
// Warehouse. It seeds the manifests repository on a GitHub Enterprise server
// with the example's manifests/, and fills the verifier's token Secret as
// the example's CronJob does (refreshToken).
// StartWarehouse then starts the flow. Close stops the GitHub server.
func StartPipeline(ctx context.Context, o PipelineOptions) (_ *Pipeline, err error) {
	say := o.Say
	if say == nil {
		say = func(string, ...any) {}
	}
	p := &Pipeline{Namespace: ExampleProject, c: o.Client}
	if p.GitHub, err = fakegithub.Start(fakegithub.Options{GitRoot: o.Dir, Host: GitHubHost}); err != nil {
		return nil, err
	}
	p.GitHub.AddToken(o.GitHubToken, "kargo", false)
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	// Argo CD reads the manifests repository without credentials: its repo
	// server hands them to git through its own binary as askpass, found on
	// the PATH of its image, which the harness's Argo CD does not have. Kargo
	// pushes with its credentials.
	p.GitHub.Public = true
	o.Proxy.Route(GitHubHost, p.GitHub.Addr)
	o.Proxy.Route(AnalysisHost, o.AnalysisAddr)
	p.ManifestsURL = p.GitHub.CloneURL(ManifestsOwner, ManifestsRepo)
	if p.Example, err = LoadExample(ExampleOptions{RepoRoot: o.RepoRoot, ProgramURL: o.ProgramURL, ManifestsURL: p.ManifestsURL, RetryCap: o.RetryCap}); err != nil {
		return nil, err
	}
	for path, content := range o.Manifests {
		if _, ok := p.Example.Manifests[path]; ok {
			return nil, fmt.Errorf("manifest %s is the example's own", path)
		}
		p.Example.Manifests[path] = []byte(content)
	}
	if err := p.seedManifests(ctx); err != nil {
		return nil, fmt.Errorf("seed the manifests repository: %w", err)
	}
	say("manifests repository %s on a local GitHub Enterprise server (examples/kargo/manifests)", p.ManifestsURL)

	apply := func(u *unstructured.Unstructured) error {
		if err := o.Client.Patch(ctx, u, client.Apply, client.FieldOwner("kubectl"), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
		return nil
	}
	var cluster []*unstructured.Unstructured
	for _, f := range []string{"analysis/config/default/verifier_roles.yaml", "analysis/config/templates/clusteranalysistemplates.yaml"} {
		b, err := os.ReadFile(filepath.Join(o.RepoRoot, f))
		if err != nil {
			return nil, err
		}
		objs, err := decode(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		cluster = append(cluster, objs...)
	}
	tasks, err := Kustomize(filepath.Join(o.RepoRoot, "kargo-steps", "config", "tasks"))
	if err != nil {
		return nil, err
	}
	for _, u := range append(cluster, tasks...) {
		if err := apply(u); err != nil {
			return nil, err
		}
	}
	say("applied ClusterRole stackflow-stack-verifier, the ClusterAnalysisTemplates and the ClusterPromotionTasks stackflow-promote and stackflow-promote-pr, unmodified")

	if err := o.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ExampleStackNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if err := o.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ExampleStackNamespace, Name: "pulumi-api"},
		StringData: map[string]string{"accessToken": "pul-unused-by-the-file-backend"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	repoSecret := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": ManifestsRepo, "namespace": "argocd",
			"labels": map[string]any{"argocd.argoproj.io/secret-type": "repository"}},
		"stringData": map[string]any{"type": "git", "url": p.ManifestsURL, "proxy": o.Proxy.URL},
	}}
	for _, u := range append([]*unstructured.Unstructured{repoSecret}, p.Example.Argo...) {
		if err := apply(u); err != nil {
			return nil, err
		}
	}
	say("applied Argo CD's repository Secret (through the proxy) and examples/kargo/argocd: AppProject kargo-demo, Applications kargo-demo-{dev,preview,test,prod}")

	if err := apply(p.Example.Project); err != nil {
		return nil, err
	}
	if err := p.waitProjectNamespace(ctx); err != nil {
		return nil, err
	}
	creds := p.Example.GitCredentials.DeepCopy()
	if err := unstructured.SetNestedStringMap(creds.Object, map[string]string{
		"repoURL": p.ManifestsURL, "username": "kargo", "password": o.GitHubToken}, "stringData"); err != nil {
		return nil, err
	}
	if err := apply(creds); err != nil {
		return nil, err
	}
	for _, u := range p.Example.Objects {
		if u.GetKind() == "Warehouse" {
			continue
		}
		if err := apply(u); err != nil {
			return nil, err
		}
	}
	if err := p.refreshToken(ctx, o.Config); err != nil {
		return nil, err
	}
	say("applied examples/kargo: Project kargo-demo, ProjectConfig, Stages dev, preview, test, prod, the verifier's identity and its token refresher (run once), and the git credentials for the manifests repository")
	return p, nil
}

// StartWarehouse applies the example's Warehouse: it discovers the newest
// commit of the program repository as Freight, and auto-promotion begins.
func (p *Pipeline) StartWarehouse(ctx context.Context) error {
	for _, u := range p.Example.Objects {
		if u.GetKind() == "Warehouse" {
			return p.c.Patch(ctx, u, client.Apply, client.FieldOwner("kubectl"), client.ForceOwnership)
		}
	}
	return fmt.Errorf("examples/kargo has no Warehouse")
}

// Close stops the GitHub server.
func (p *Pipeline) Close() {
	if p.GitHub != nil {
		_ = p.GitHub.Close()
	}
}

// waitProjectNamespace waits until Kargo has made the project's namespace.
func (p *Pipeline) waitProjectNamespace(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		ns := &corev1.Namespace{}
		err := p.c.Get(ctx, types.NamespacedName{Name: p.Namespace}, ns)
		if err == nil && ns.Labels["kargo.akuity.io/project"] == "true" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("Kargo did not make the project namespace %s in a minute (last error: %v)", p.Namespace, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// seedManifests pushes the example's manifests/ as the first commit of the
// manifests repository's main.
func (p *Pipeline) seedManifests(ctx context.Context) error {
	bare, err := p.GitHub.InitRepo(ctx, ManifestsOwner, ManifestsRepo)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "stackflow-manifests-seed-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	for name, b := range p.Example.Manifests {
		path := filepath.Join(work, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "The Stacks of examples/kargo/manifests"},
		{"push", "-q", bare, "main"},
	} {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=stackflow", "GIT_AUTHOR_EMAIL=stackflow@stackflow.invalid",
			"GIT_COMMITTER_NAME=stackflow", "GIT_COMMITTER_EMAIL=stackflow@stackflow.invalid", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// refreshToken fills the verifier's token Secret as the example's CronJob
// does when it first runs (the walk-through runs it once by hand after the
// apply; a bare control plane runs no CronJobs): `stackflow-analysis
// refresh-token` with the CronJob's args, as the CronJob's ServiceAccount
// (its token for the API server, as its pod would mount), so that only the
// RBAC the example grants it is used.
func (p *Pipeline) refreshToken(ctx context.Context, cfg *rest.Config) error {
	var cron *unstructured.Unstructured
	for _, u := range p.Example.Objects {
		if u.GetKind() == "CronJob" && u.GetName() == "stackflow-verifier-token" {
			cron = u
		}
	}
	if cron == nil {
		return fmt.Errorf("examples/kargo has no CronJob stackflow-verifier-token")
	}
	containers, _, err := unstructured.NestedSlice(cron.Object, "spec", "jobTemplate", "spec", "template", "spec", "containers")
	if err != nil || len(containers) == 0 {
		return fmt.Errorf("CronJob stackflow-verifier-token: no containers (%v)", err)
	}
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	sa, _, _ := unstructured.NestedString(cron.Object, "spec", "jobTemplate", "spec", "template", "spec", "serviceAccountName")
	if len(args) == 0 || args[0] != "refresh-token" || sa == "" {
		return fmt.Errorf("CronJob stackflow-verifier-token runs %q as %q, want refresh-token as its ServiceAccount", args, sa)
	}
	var o tokensecret.Options
	fs := flag.NewFlagSet("refresh-token", flag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("CronJob stackflow-verifier-token's args: %w", err)
	}
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	tr, err := admin.CoreV1().ServiceAccounts(p.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("a token for %s/%s: %w", p.Namespace, sa, err)
	}
	asCron := rest.AnonymousClientConfig(cfg)
	asCron.BearerToken = tr.Status.Token
	if o.Client, err = kubernetes.NewForConfig(asCron); err != nil {
		return err
	}
	o.Namespace = p.Namespace
	if _, err := tokensecret.Refresh(ctx, o); err != nil {
		return fmt.Errorf("refresh the verifier's token as the CronJob: %w", err)
	}
	return nil
}

// Kustomize builds a kustomization directory, as `kubectl apply -k` does.
func Kustomize(dir string) ([]*unstructured.Unstructured, error) {
	b, err := kustomizeYAML(dir)
	if err != nil {
		return nil, err
	}
	return decode(b)
}

func kustomizeYAML(dir string) ([]byte, error) {
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	return rm.AsYaml()
}
