// Package demo runs `make demo`: a staged rollout of a Pulumi program
// dev → test → prod on this machine, offline, with the real parts.
//
// It starts a local control plane with the operator (local workspace
// runtime, file:// backend, the repository's test resource provider), the
// analysis service with Kubernetes authentication, and the real Argo CD
// (application controller, repo server, API server) syncing a manifests
// repository laid out as examples/argocd, served with a program repository
// over loopback git HTTP. Then it rolls a release out with the steps of the
// ClusterPromotionTask stackflow-promote (pin the Stack's commit, commit,
// push, sync the Application, wait for the analysis service's verdict),
// asks before prod, and rolls out a broken release that stops at dev.
//
// When Kargo is built (hack/substrate.sh kargo, from ../shared/kargo/src), the
// real Kargo runs the rollout instead (kargo.go): examples/kargo's Warehouse
// and Stages with Stackflow's promotion tasks, verified by Argo Rollouts;
// otherwise the demo performs the tasks' steps itself, and says why.
package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	argoappv1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stackflow-io/stackflow/analysis/service"
	"github.com/stackflow-io/stackflow/analysis/verification"
	"github.com/stackflow-io/stackflow/internal/conditions"
	"github.com/stackflow-io/stackflow/internal/revision"
	"github.com/stackflow-io/stackflow/kargo-steps/manifest"
	"github.com/stackflow-io/stackflow/kargo-steps/waiter"
	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/devtools/devenv"
	"github.com/stackflow-io/stackflow/test/framework/argocd"
	"github.com/stackflow-io/stackflow/test/framework/kargo"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// Options configure a demo run.
type Options struct {
	// Dir holds everything the run makes (wiped at start): kubeconfig,
	// repositories, backend, Argo CD's state and logs.
	Dir string
	// Yes promotes to prod without asking.
	Yes bool
	// In answers the approval question (default: standard input).
	In io.Reader
	// Out receives the narration and the table.
	Out io.Writer
	// Live redraws the table in place (a terminal); otherwise it is printed
	// again whenever it changes.
	Live bool
	// Stay keeps everything running after the summary, for kubectl, until
	// ctx ends.
	Stay bool
	// Examples is the examples/argocd directory (default: the repository's).
	Examples string
	// OnSummary, when set, receives the summary as soon as it is printed
	// (before Stay keeps everything running): --summary-json writes it
	// then, so a script waiting for the file does not wait for Ctrl-C.
	OnSummary func(*Summary) error
	// ArgoCDVersion is the Argo CD build to run (default: argocd.V3).
	ArgoCDVersion argocd.Version
}

// Summary is how the demo ended.
type Summary struct {
	// Release is the commit rolled out to every stage; Broken the failing
	// commit that stopped at dev.
	Release, Broken string
	// Stages are the final rows of the table.
	Stages []Row
	// Stopped is the analysis service's verdict on the broken commit at dev.
	Stopped verification.Result
	// ProdDeclined is true when the approval before prod was refused.
	ProdDeclined bool
	// ArgoCD says whether the real Argo CD synced (false: the fallback
	// server-side-apply loop did).
	ArgoCD bool
	// ArgoCDVersion is the version of the Argo CD that synced, e.g. v3.2.11.
	ArgoCDVersion string
	// ArgoCDUI is the URL of Argo CD's web UI (its Applications page), empty
	// when the Argo CD build has no UI.
	ArgoCDUI string
	// Kargo says whether the real Kargo promoted (false: the demo ran the
	// tasks' steps).
	Kargo bool
	// Kubeconfig is a kubeconfig of the control plane.
	Kubeconfig string
	// Elapsed is the whole run.
	Elapsed time.Duration
}

// verifierNamespace is the Kargo project namespace of examples/kargo, where
// the verifier's ServiceAccount lives (analysis/config/kargo-project).
const verifierNamespace = "kargo-demo"

// demo is one run's state.
type demo struct {
	o     Options
	scr   *screen
	start time.Time
	local *devenv.Local
	c     client.Client
	argo  *argocd.Instance
	// argoVersion is the running Argo CD's version.
	argoVersion string
	// argoUI is the URL of Argo CD's web UI, when the build embeds it.
	argoUI   string
	git      *gitServer
	program  *repo
	mf       *repo
	stages   []stage
	analysis string
	token    string
	// kargo is the real Kargo, when it runs.
	kargo *kargoRun
}

// Run runs the demo.
func Run(ctx context.Context, o Options) (*Summary, error) {
	if o.In == nil {
		o.In = os.Stdin
	}
	if o.Examples == "" {
		o.Examples = filepath.Join(substrate.RepoRoot(), "examples", "argocd")
	}
	if o.ArgoCDVersion == "" {
		o.ArgoCDVersion = argocd.V3
	}
	d := &demo{o: o, start: time.Now()}
	d.scr = newScreen(o.Out, o.Live, d.start)
	say := d.scr.Say
	say("Stackflow demo: a Pulumi program rolled out dev → test → prod by Argo CD and Kargo's promotion steps, on this machine")

	l, err := devenv.Start(ctx, devenv.LocalOptions{Dir: o.Dir, ResyncEvery: 2 * time.Second, Say: say})
	if err != nil {
		return nil, err
	}
	defer l.Stop()
	d.local = l
	sum := &Summary{Kubeconfig: l.Kubeconfig}
	if d.c, err = client.New(l.CP.Config, client.Options{Scheme: scheme()}); err != nil {
		return nil, err
	}
	if err := d.startArgoCD(ctx); err != nil {
		return nil, err
	}
	if d.argo != nil {
		defer d.argo.Stop()
		sum.ArgoCD, sum.ArgoCDVersion, sum.ArgoCDUI = true, d.argoVersion, d.argoUI
		if kb, rb, err := locateKargo(); err != nil {
			say("Kargo is not run (%v): the demo performs the steps of its promotion tasks itself", err)
		} else if err := d.startKargo(ctx, kb, rb); err != nil {
			say("Kargo could not start (%v): the demo performs the steps of its promotion tasks itself", err)
		} else {
			defer d.kargo.stop()
		}
	}
	// Stopped (deferred) before the control plane is.
	actx, stopAnalysis := context.WithCancel(ctx)
	defer stopAnalysis()
	if d.kargo != nil {
		if err := d.runKargo(actx, sum); err != nil {
			return nil, err
		}
		return sum, nil
	}
	if err := d.startAnalysis(actx); err != nil {
		return nil, err
	}
	first, err := d.makeRepositories(ctx)
	if d.git != nil {
		defer d.git.Stop()
	}
	if err != nil {
		return nil, err
	}
	if err := d.deploy(ctx); err != nil {
		return nil, err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go d.watch(watchCtx)

	// The first release reaches every stage as the manifests say: dev
	// tracks main, test and prod are pinned to it.
	say("first rollout: every stage deploys release 1 (%s); test waits for dev and prod for test (Stack prerequisites)", revision.Short(first))
	for _, st := range d.stages {
		if _, err := d.verify(ctx, st, first, 4*time.Minute); err != nil {
			return nil, err
		}
	}

	// Release 2: dev deploys it by itself (it tracks main); test and prod
	// get it by promotion.
	release, err := d.program.commit(ctx, "Release 2: a new greeting", map[string]string{programFile: programYAML(2, false)})
	if err != nil {
		return nil, err
	}
	sum.Release = release
	say("release 2 committed to the program repository: %s; dev tracks main and deploys it", revision.Short(release))
	if _, err := d.verify(ctx, d.stages[0], release, 3*time.Minute); err != nil {
		return nil, err
	}
	for _, st := range d.stages[1:] {
		if st.Name == "prod" && !o.Yes {
			ok, err := d.approve(ctx, st, release)
			if err != nil {
				return nil, err
			}
			if !ok {
				say("prod not promoted: approval declined (in Kargo, the pull request of stackflow-promote-pr stays open)")
				sum.ProdDeclined = true
				break
			}
		}
		if err := d.promote(ctx, st, release); err != nil {
			return nil, err
		}
	}

	// Release 3 is broken: dev fails it, and nothing promotes it further.
	broken, err := d.program.commit(ctx, "Release 3: breaks on update", map[string]string{programFile: programYAML(3, true)})
	if err != nil {
		return nil, err
	}
	sum.Broken = broken
	say("release 3 committed: %s; its program fails on update. dev deploys it; a promotion to test first needs dev's verification", revision.Short(broken))
	res, err := d.verify(ctx, d.stages[0], broken, 4*time.Minute)
	if err == nil {
		return nil, fmt.Errorf("release 3 was verified at dev, but its program fails on update")
	}
	var stopped *stoppedError
	if !errors.As(err, &stopped) {
		return nil, err
	}
	sum.Stopped = res
	say("release 3 stopped at dev: %s: %s", res.Reason, res.Message)
	say("it is not promoted: test and prod stay at release 2 (%s)", revision.Short(release))

	stopWatch()
	sum.Stages = d.rows(ctx)
	d.scr.Update(sum.Stages)
	sum.Elapsed = time.Since(d.start)
	if err := d.summary(sum); err != nil {
		return sum, err
	}
	if o.Stay {
		say("everything keeps running: export KUBECONFIG=%s; kubectl get stacks -A; kubectl get applications -n argocd. Ctrl-C stops it", l.Kubeconfig)
		select {
		case <-ctx.Done():
		case err := <-l.Done():
			return sum, err
		}
	}
	return sum, nil
}

func scheme() *runtime.Scheme {
	s := substrate.Scheme()
	if err := argoappv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// startArgoCD starts the real Argo CD, or says why it cannot and leaves
// d.argo nil for the fallback sync loop.
func (d *demo) startArgoCD(ctx context.Context) error {
	build, err := argocd.Locate(d.o.ArgoCDVersion)
	if err != nil {
		d.scr.Say("Argo CD is not available (%v): a server-side-apply loop syncs the manifests instead, in sync-wave order, without Argo CD's health or UI", err)
		return nil
	}
	d.argoVersion = build.Version
	d.scr.Say("starting Argo CD %s (application controller, repo server, API server) with Stackflow's health checks in argocd-cm", build.Version)
	if err := build.InstallCRDs(d.local.CP.Env); err != nil {
		return fmt.Errorf("install Argo CD CRDs: %w", err)
	}
	// TLS (a self-signed certificate for 127.0.0.1) where the UI is served:
	// a browser then speaks HTTP/2 to it, which the UI's watch streams need
	// (argocd.Options.TLS).
	d.argo, err = argocd.Start(ctx, argocd.Options{Build: build, Env: d.local.CP.Env, Client: d.c, Dir: filepath.Join(d.local.Dir, "argocd"), RepoRoot: substrate.RepoRoot(),
		TLS: build.UI})
	if err != nil {
		return fmt.Errorf("start Argo CD: %w", err)
	}
	d.scr.Say("Argo CD API on %s (no authentication: loopback only); logs in %s", d.argo.APIURL, filepath.Join(d.local.Dir, "argocd"))
	if build.UI {
		url, err := d.argo.CheckUI(ctx)
		if err != nil {
			return err
		}
		d.argoUI = url
		d.scr.Say("Argo CD UI: open %s in a browser to watch the stages move (no login: authentication is off, loopback only; the certificate is self-signed for 127.0.0.1: accept it)", url)
	} else {
		d.scr.Say("Argo CD's web UI is not in this build (it needs ../shared/argo-ui: see hack/substrate.sh argocd3-ui); its API and health checks run all the same")
	}
	return nil
}

// startAnalysis runs the analysis service with Kubernetes authentication and
// mints a token for a verifier ServiceAccount bound to read the Stacks, as
// analysis/config/kargo-project sets up for a Kargo project.
func (d *demo) startAnalysis(ctx context.Context) error {
	if err := d.serveAnalysis(ctx); err != nil {
		return err
	}
	for _, path := range []string{"analysis/config/default/verifier_roles.yaml"} {
		docs, err := readDocs(filepath.Join(substrate.RepoRoot(), path))
		if err != nil {
			return err
		}
		for _, u := range docs {
			if err := d.apply(ctx, u); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
		}
	}
	stackNS := "infra"
	for _, ns := range []string{verifierNamespace, stackNS} {
		if err := d.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: verifierNamespace, Name: "stackflow-verifier"}}
	if err := d.c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: stackNS, Name: "stackflow-verifier-" + verifierNamespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "stackflow-stack-verifier"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: verifierNamespace, Name: sa.Name}},
	}
	if err := d.c.Create(ctx, rb); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	cs, err := kubernetes.NewForConfig(d.local.CP.Config)
	if err != nil {
		return err
	}
	expiry := int64(3600 * 4)
	// A token for the service's audience: it refuses one for the API
	// server's own.
	tr, err := cs.CoreV1().ServiceAccounts(verifierNamespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{service.DefaultAudience}, ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	d.token = filepath.Join(d.local.Dir, "verifier-token")
	if err := os.WriteFile(d.token, []byte(tr.Status.Token), 0o600); err != nil {
		return err
	}
	d.scr.Say("analysis service on %s (TokenReview + SubjectAccessReview); verifier ServiceAccount %s/%s may get Stacks in %s", d.analysis, verifierNamespace, sa.Name, stackNS)
	return nil
}

// serveAnalysis runs the analysis service with Kubernetes authentication
// until ctx ends, and sets d.analysis once its caches have synced.
func (d *demo) serveAnalysis(ctx context.Context) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- service.Run(ctx, service.Options{Auth: service.AuthKube, AuthCacheTTL: 10 * time.Second, Config: d.local.CP.Config,
			Listener: ln, Log: ctrl.Log.WithName("analysis"), Ready: ready})
	}()
	select {
	case <-ready:
	case err := <-done:
		return fmt.Errorf("analysis service: %w", err)
	case <-time.After(time.Minute):
		return errors.New("analysis service: caches not synced in a minute")
	}
	d.analysis = "http://" + ln.Addr().String()
	return nil
}

// programFile is the program's path in the program repository (the
// example Stacks' repoDir).
const programFile = "programs/web/Pulumi.yaml"

// programYAML is release n of the demo's program: one record of the test
// provider whose content is the environment's greeting (from its
// ConfigMap, or "hello": examples/kargo's Stacks set none) and the release;
// broken releases fail on update.
func programYAML(n int, broken bool) string {
	failOn := ""
	if broken {
		failOn = "update"
	}
	return fmt.Sprintf(`name: web
runtime: yaml
description: The demo's program, release %d
config:
  greeting:
    type: string
    default: hello
resources:
  site:
    type: stackflowtest:index:Record
    properties:
      name: web-${pulumi.stack}
      content: "${greeting} (release %d)"
      failOn: "%s"
      sleepSeconds: 2
outputs:
  content: ${site.content}
`, n, n, failOn)
}

// makeRepositories creates the program repository (release 1) and the
// manifests repository (examples/argocd's environments, adapted), served on
// loopback, and returns release 1's commit.
func (d *demo) makeRepositories(ctx context.Context) (string, error) {
	root := filepath.Join(d.local.Dir, "git")
	var err error
	if d.git, err = startGitServer(filepath.Join(root, "served")); err != nil {
		return "", err
	}
	if d.program, err = newRepo(ctx, d.git, "program.git", filepath.Join(root, "work", "program")); err != nil {
		return "", err
	}
	first, err := d.program.commit(ctx, "Release 1", map[string]string{programFile: programYAML(1, false)})
	if err != nil {
		return "", err
	}
	if d.mf, err = newRepo(ctx, d.git, "manifests.git", filepath.Join(root, "work", "manifests")); err != nil {
		return "", err
	}
	d.stages, err = writeEnvironments(d.o.Examples, d.mf.work, localRewrite{ProgramURL: d.git.URL("program.git"), FirstCommit: first, RetryCap: 5})
	if err != nil {
		return "", err
	}
	if _, err := d.mf.commitAll(ctx, "Environments from examples/argocd, pinned to release 1"); err != nil {
		return "", err
	}
	d.scr.Say("program repository %s (release 1: %s), manifests repository %s (examples/argocd/environments; projectRepo, commit and retry cap set for this machine, no Pulumi access token: a file:// backend)",
		d.git.URL("program.git"), revision.Short(first), d.git.URL("manifests.git"))
	d.scr.Say("working clones to play with: %s, %s", d.program.work, d.mf.work)
	return first, nil
}

// deploy gives Argo CD the example's AppProject and Applications, pointed at
// the manifests repository, or starts the fallback sync loop.
func (d *demo) deploy(ctx context.Context) error {
	project, apps, err := argoObjects(d.o.Examples, d.git.URL("manifests.git"))
	if err != nil {
		return err
	}
	for i := range d.stages {
		d.stages[i].App = apps[d.stages[i].Name].GetName()
	}
	if d.argo == nil {
		go d.syncLoop(ctx)
		return nil
	}
	if err := d.apply(ctx, project); err != nil {
		return fmt.Errorf("AppProject: %w", err)
	}
	for _, name := range Stages {
		if err := d.apply(ctx, apps[name]); err != nil {
			return fmt.Errorf("Application %s: %w", apps[name].GetName(), err)
		}
	}
	d.scr.Say("applied AppProject %s and Applications %s from examples/argocd", project.GetName(), strings.Join(appNames(d.stages), ", "))
	return nil
}

func appNames(stages []stage) []string {
	var names []string
	for _, st := range stages {
		names = append(names, st.App)
	}
	return names
}

// apply applies an object server-side as the demo.
func (d *demo) apply(ctx context.Context, u *unstructured.Unstructured) error {
	return d.c.Patch(ctx, u, client.Apply, client.FieldOwner("stackflow-demo"), client.ForceOwnership)
}

// stoppedError is a verification that ended Failed (or timed out).
type stoppedError struct{ res verification.Result }

func (e *stoppedError) Error() string { return e.res.Reason + ": " + e.res.Message }

// verify waits, through the analysis service as Kargo's http step does,
// until the stage's Stack has applied the commit; a Failed verdict is a
// *stoppedError.
func (d *demo) verify(ctx context.Context, st stage, commit string, timeout time.Duration) (verification.Result, error) {
	d.scr.Say("%s: waiting for the analysis service to verify %s/%s at %s", st.Name, st.StackNamespace, st.StackName, revision.Short(commit))
	out, err := waiter.Wait(ctx, waiter.Options{URL: d.analysis, Namespace: st.StackNamespace, Stack: st.StackName, Commit: commit,
		Operation: verification.OperationUp, Timeout: timeout, TokenFile: d.token})
	if err != nil {
		return verification.Result{}, err
	}
	if !out.Succeeded {
		if ctx.Err() != nil {
			return out.Result, ctx.Err()
		}
		if out.Result.Reason == "" {
			out.Result.Reason, out.Result.Message = out.Reason, out.Message
		}
		return out.Result, &stoppedError{out.Result}
	}
	d.scr.Say("%s: verified: %s", st.Name, out.Message)
	return out.Result, nil
}

// promote runs the steps of the ClusterPromotionTask stackflow-promote for
// the stage: clone the manifests, pin the Stack's spec.commit, commit, push,
// sync the Application to the pushed commit, wait for verification.
func (d *demo) promote(ctx context.Context, st stage, commit string) error {
	say := d.scr.Say
	say("%s: promoting %s with the steps of ClusterPromotionTask stackflow-promote (Kargo is not run here: the demo runs its steps)", st.Name, revision.Short(commit))
	dir := filepath.Join(d.local.Dir, "git", "promotions", fmt.Sprintf("%s-%s", st.Name, revision.Short(commit)))
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := git(ctx, filepath.Dir(dir), "clone", "-q", "--branch", "main", d.mf.bare, dir); err != nil {
		return err
	}
	say("%s:   git-clone   manifests main", st.Name)
	res, err := manifest.SetCommit(dir, manifest.Target{Namespace: st.StackNamespace, Name: st.StackName}, commit)
	if err != nil {
		return err
	}
	say("%s:   set-commit  %s spec.commit %s → %s", st.Name, res.File, revision.Short(res.OldCommit), revision.Short(commit))
	r := &repo{bare: d.mf.bare, work: dir}
	pushed, err := r.commitAll(ctx, fmt.Sprintf("%s: Stack %s/%s to %s", st.Name, st.StackNamespace, st.StackName, revision.Short(commit)))
	if err != nil {
		return err
	}
	say("%s:   git-commit, git-push  manifests %s", st.Name, revision.Short(pushed))
	if d.argo != nil {
		if err := d.sync(ctx, st, pushed); err != nil {
			return err
		}
		say("%s:   argocd-update  Application %s synced to %s", st.Name, st.App, revision.Short(pushed))
	}
	_, err = d.verify(ctx, st, commit, 4*time.Minute)
	return err
}

// sync asks Argo CD to sync the stage's Application to the revision, as
// Kargo's argocd-update step does (an operation on the Application), and
// waits until the sync to that revision finished.
func (d *demo) sync(ctx context.Context, st stage, rev string) error {
	key := types.NamespacedName{Namespace: argocd.Namespace, Name: st.App}
	requested := false
	deadline := time.Now().Add(4 * time.Minute)
	for {
		app := &argoappv1.Application{}
		if err := d.c.Get(ctx, key, app); err != nil {
			return err
		}
		op := app.Status.OperationState
		if op != nil && op.SyncResult != nil && op.SyncResult.Revision == rev && op.Phase.Completed() {
			if !op.Phase.Successful() {
				return fmt.Errorf("Argo CD sync of %s to %s: %s: %s", st.App, revision.Short(rev), op.Phase, op.Message)
			}
			return nil
		}
		running := app.Operation != nil || (op != nil && !op.Phase.Completed())
		if !requested && !running {
			// As Kargo's argocd-update does: the Application's own sync
			// options and retry policy, initiated as an automated sync,
			// patched in (the Application's status is not a subresource: an
			// update would write back a stale one).
			op := &argoappv1.Operation{
				Sync:        &argoappv1.SyncOperation{Revision: rev},
				InitiatedBy: argoappv1.OperationInitiator{Username: "stackflow-demo", Automated: true},
				Info:        []*argoappv1.Info{{Name: "Reason", Value: "Promotion of " + st.Name + " by stackflow-demo"}},
			}
			if p := app.Spec.SyncPolicy; p != nil {
				op.Sync.SyncOptions = p.SyncOptions
				if p.Retry != nil {
					op.Retry = *p.Retry
				}
			}
			patch := client.MergeFrom(app.DeepCopy())
			app.Operation = op
			// Kargo's argocd-update asks for a hard refresh with the sync: the
			// repository server resolves the tracked branch afresh, so the next
			// comparison (and an automated sync after it) sees the pushed
			// commit instead of the branch head it had cached.
			if app.Annotations == nil {
				app.Annotations = map[string]string{}
			}
			app.Annotations[argoappv1.AnnotationKeyRefresh] = string(argoappv1.RefreshTypeHard)
			if err := d.c.Patch(ctx, app, patch); err != nil {
				return fmt.Errorf("request the sync of %s: %w", st.App, err)
			}
			requested = true
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("Argo CD did not sync %s to %s in 4 minutes", st.App, revision.Short(rev))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// approve asks whether to promote to prod.
func (d *demo) approve(ctx context.Context, st stage, commit string) (bool, error) {
	return d.ask(ctx, fmt.Sprintf("Promote %s to %s? In Kargo, stackflow-promote-pr opens a pull request and a person approves by merging it. [y/N] ", revision.Short(commit), st.Name))
}

// ask asks a yes/no question; only y or yes is yes.
func (d *demo) ask(ctx context.Context, question string) (bool, error) {
	d.scr.Ask(question)
	answer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(d.o.In).ReadString('\n')
		answer <- strings.TrimSpace(strings.ToLower(line))
	}()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case a := <-answer:
		return a == "y" || a == "yes", nil
	}
}

// watch refreshes the table until ctx ends.
func (d *demo) watch(ctx context.Context) {
	for ctx.Err() == nil {
		d.scr.Update(d.rows(ctx))
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// rows reads each stage's Stack and Application.
func (d *demo) rows(ctx context.Context) []Row {
	var rows []Row
	for _, st := range d.stages {
		r := Row{Stage: st.Name, Stack: st.StackNamespace + "/" + st.StackName}
		s := &pulumiv1.Stack{}
		if err := d.c.Get(ctx, types.NamespacedName{Namespace: st.StackNamespace, Name: st.StackName}, s); err == nil {
			r.Commit, r.State, r.LastUpdate, r.Since = stackColumns(s)
		} else {
			r.State = "not synced yet"
		}
		if d.argo == nil {
			r.Health = "(no Argo CD)"
		} else if st.App != "" {
			app := &argoappv1.Application{}
			if err := d.c.Get(ctx, types.NamespacedName{Namespace: argocd.Namespace, Name: st.App}, app); err == nil {
				r.Health = strings.TrimSpace(string(app.Status.Health.Status) + " " + string(app.Status.Sync.Status))
			}
		}
		rows = append(rows, r)
	}
	if d.kargo != nil {
		d.kargo.kargoColumns(ctx, rows)
	}
	return rows
}

// stackColumns are the table's view of a Stack.
func stackColumns(s *pulumiv1.Stack) (commit, state, lastUpdate string, since time.Time) {
	if lu := s.Status.LastUpdate; lu != nil {
		commit = revision.Short(lu.LastSuccessfulCommit)
		switch {
		case lu.Type == autov1alpha1.PreviewType && lu.State == pulumiv1.SucceededStackStateMessage:
			// lastSuccessfulCommit is the last successful up's: a preview
			// Stack's commit is the one it last previewed.
			commit = revision.Short(lu.LastAttemptedCommit) + " (previewed)"
		case lu.LastAttemptedCommit != "" && lu.LastAttemptedCommit != lu.LastSuccessfulCommit:
			commit = strings.TrimSpace(commit + " (tried " + revision.Short(lu.LastAttemptedCommit) + ")")
		}
		lastUpdate = strings.TrimSpace(fmt.Sprintf("%s %s %s", lu.Type, lu.State, lu.Name))
	}
	for _, t := range []string{"Stalled", "Reconciling"} {
		if c := conditions.Current(s, s.Status.Conditions, t); c != nil && c.Status == metav1.ConditionTrue {
			return commit, t + " (" + c.Reason + ")", lastUpdate, c.LastTransitionTime.Time
		}
	}
	if c := conditions.Current(s, s.Status.Conditions, pulumiv1.ReadyCondition); c != nil {
		if c.Status == metav1.ConditionTrue {
			return commit, "Ready", lastUpdate, c.LastTransitionTime.Time
		}
		return commit, "not Ready (" + c.Reason + ")", lastUpdate, c.LastTransitionTime.Time
	}
	return commit, "waiting for the operator", lastUpdate, s.CreationTimestamp.Time
}

// summary prints the end of the run.
func (d *demo) summary(sum *Summary) error {
	d.printSummary(sum)
	if d.o.OnSummary != nil {
		return d.o.OnSummary(sum)
	}
	return nil
}

// printSummary prints how the run ended.
func (d *demo) printSummary(sum *Summary) {
	d.scr.Print()
	w := d.o.Out
	fmt.Fprintf(w, "\nSummary (%s):\n", formatDuration(sum.Elapsed))
	if sum.Kargo {
		fmt.Fprintf(w, "  release 2 (%s) was found by Kargo's Warehouse, auto-promoted into dev and preview, promoted into test and, through a merged pull request, prod", revision.Short(sum.Release))
	} else {
		fmt.Fprintf(w, "  release 2 (%s) went dev → test → prod", revision.Short(sum.Release))
	}
	if sum.ProdDeclined {
		fmt.Fprint(w, " (prod declined at the approval)")
	}
	fmt.Fprintf(w, "; each stage verified by the analysis service before the next was promoted.\n")
	fmt.Fprintf(w, "  release 3 (%s) stopped at dev: %s.\n", revision.Short(sum.Broken), sum.Stopped.Reason)
	if sum.ArgoCD {
		fmt.Fprintf(w, "  Argo CD %s synced every stage, waiting on each Stack's health (Stackflow's health checks) between sync waves.\n", sum.ArgoCDVersion)
	} else {
		fmt.Fprintln(w, "  Argo CD was not available: a server-side-apply loop synced the manifests.")
	}
	if sum.Kargo {
		fmt.Fprintf(w, "  Kargo %s promoted with Stackflow's tasks stackflow-promote and stackflow-promote-pr and verified each Stage with an AnalysisRun run by Argo Rollouts.\n", kargo.Version)
	} else {
		fmt.Fprintln(w, "  Kargo did not run (see above why): the steps of its task stackflow-promote were performed by the demo.")
	}
	fmt.Fprintf(w, "  Explore: export KUBECONFIG=%s; kubectl get stacks -A; kubectl get updates -A; kubectl get applications -n argocd\n", sum.Kubeconfig)
	if sum.ArgoCDUI != "" {
		fmt.Fprintf(w, "  Argo CD UI (while the demo runs): %s (no login)\n", sum.ArgoCDUI)
	}
}

// syncLoop is the fallback when Argo CD is not available: every two
// seconds, it applies each environment of the manifests repository's main
// server-side, in sync-wave order.
func (d *demo) syncLoop(ctx context.Context) {
	dir := filepath.Join(d.local.Dir, "git", "sync")
	if err := git(ctx, filepath.Dir(dir), "clone", "-q", d.mf.bare, dir); err != nil {
		d.scr.Say("sync loop: %v", err)
		return
	}
	for ctx.Err() == nil {
		if err := d.syncOnce(ctx, dir); err != nil && ctx.Err() == nil {
			d.scr.Say("sync loop: %v", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}

func (d *demo) syncOnce(ctx context.Context, dir string) error {
	if err := git(ctx, dir, "pull", "-q", "--ff-only"); err != nil {
		return err
	}
	for _, st := range d.stages {
		entries, err := os.ReadDir(filepath.Join(dir, "environments", st.Name))
		if err != nil {
			return err
		}
		var objs []*unstructured.Unstructured
		for _, e := range entries {
			if !isYAML(e.Name()) {
				continue
			}
			docs, err := readDocs(filepath.Join(dir, "environments", st.Name, e.Name()))
			if err != nil {
				return err
			}
			objs = append(objs, docs...)
		}
		byWave(objs)
		for _, u := range objs {
			if u.GetNamespace() == "" && u.GetKind() != "Namespace" {
				u.SetNamespace(st.StackNamespace)
			}
			if err := d.apply(ctx, u); err != nil {
				return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
			}
		}
	}
	return nil
}
