package argocde2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	argoappv1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/test/framework/argocd"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// program is a Pulumi YAML program of one test provider record. A test
// that must see an update running holds it (updateHold), whatever the
// machine's speed, instead of making it slow.
func program(content, failOn string) string {
	return fmt.Sprintf(`name: synced
runtime: yaml
resources:
  rec:
    type: stackflowtest:index:Record
    properties:
      name: ${pulumi.stack}
      content: %s
      failOn: "%s"
`, content, failOn)
}

// manifests are an Application's files: a ConfigMap in wave -1, the Stack in
// wave 0 and a ConfigMap in wave 1 that Argo CD must apply only once the
// Stack is Healthy.
func manifests(ns, programURL string) map[string]string {
	return map[string]string{
		"app/00-inputs.yaml": fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: inputs
  namespace: %s
  annotations:
    argocd.argoproj.io/sync-wave: "-1"
data:
  greeting: hello
`, ns),
		"app/10-stack.yaml": fmt.Sprintf(`apiVersion: pulumi.com/v1
kind: Stack
metadata:
  name: web
  namespace: %s
  annotations:
    argocd.argoproj.io/sync-wave: "0"
spec:
  stack: web-%s
  projectRepo: %s
  branch: main
  destroyOnFinalize: true
  retryMaxBackoffDurationSeconds: 2
`, ns, ns, programURL),
		"app/20-released.yaml": fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: released
  namespace: %s
  annotations:
    argocd.argoproj.io/sync-wave: "1"
data:
  released: "true"
`, ns),
	}
}

// repos are a test's program and manifests repositories, served over
// smart HTTP on loopback (Argo CD reads the manifests that way).
type repos struct {
	srv             *gitrepo.HTTPServer
	prog, manifests *gitrepo.Repo
}

func serveRepos(t *testing.T) repos {
	t.Helper()
	served := t.TempDir()
	srv := gitrepo.NewHTTPServer(t, served)
	srv.Start(t)
	return repos{srv: srv, prog: gitrepo.NewIn(t, served, "program"), manifests: gitrepo.NewIn(t, served, "manifests")}
}

// manifestsURL is the manifests repository's URL for Argo CD.
func (r repos) manifestsURL() string { return r.manifests.HTTPURL(r.srv) }

// application syncs path app of repoURL into ns, automatically, with
// server-side apply. Its resources finalizer deletes the resources with the
// Application, with background propagation: the plain finalizer
// (resources-finalizer.argocd.argoproj.io) deletes in the foreground, which
// needs the garbage collector of kube-controller-manager to clear the
// foregroundDeletion finalizer, and a bare API server has none.
func application(name, ns, repoURL string) *argoappv1.Application {
	return &argoappv1.Application{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: argocd.Namespace, Finalizers: []string{argoappv1.BackgroundPropagationPolicyFinalizer}},
		Spec: argoappv1.ApplicationSpec{
			Project:     "default",
			Source:      &argoappv1.ApplicationSource{RepoURL: repoURL, TargetRevision: "main", Path: "app"},
			Destination: argoappv1.ApplicationDestination{Server: argoappv1.KubernetesInternalAPIServerAddr, Namespace: ns},
			SyncPolicy: &argoappv1.SyncPolicy{
				Automated:   &argoappv1.SyncPolicyAutomated{Prune: true, SelfHeal: true},
				SyncOptions: argoappv1.SyncOptions{"ServerSideApply=true"},
			},
		},
	}
}

// persistedStackHealth is the health of the Application's Stack in the
// Application's status, where Argo CD 2.14 persists it and v3 does not.
func persistedStackHealth(app *argoappv1.Application, name string) (*argoappv1.HealthStatus, bool) {
	for _, r := range app.Status.Resources {
		if r.Group == pulumiv1.GroupVersion.Group && r.Kind == "Stack" && r.Name == name {
			return r.Health, true
		}
	}
	return nil, false
}

// TestApplicationFollowsStack syncs an Application holding a Stack with the
// real Argo CD application controller, repo server and API server (v3 and
// v2.14, each with its own defaults), the operator and a real Pulumi engine,
// and shows, as computed by Argo CD with Stackflow's health checks installed
// in argocd-cm and read through Argo CD's API (the resource tree, where v3
// keeps resource health):
//   - the Application is Progressing while the Stack's update runs, and the
//     sync waits for the Stack before applying the next wave;
//   - it is Healthy once the Stack is at the commit;
//   - it is Degraded when the program fails, and Healthy again when fixed;
//   - the Stack's reconcile-now action, run through Argo CD's API, runs an
//     update;
//   - deleting the Application (resources finalizer) deletes the Stack, whose
//     destroyOnFinalize destroys the stack's resources.
func TestApplicationFollowsStack(t *testing.T) {
	for _, v := range argocd.Versions {
		t.Run("argocd-"+string(v), func(t *testing.T) {
			start := time.Now()
			applicationFollowsStack(t, startArgo(t, v))
			t.Logf("Argo CD %s: %s", v, time.Since(start).Round(time.Second))
		})
	}
}

func applicationFollowsStack(t *testing.T, e *argoEnv) {
	cp, argo := e.cp, e.argo
	ctx := context.Background()
	c := e.c
	ns := cp.Namespace(t)
	pe := substrate.NewPulumi(t)
	hold := newUpdateHold(t)
	startOperator(t, cp, ns, pe, hold.agentEnv())

	r := serveRepos(t)
	sha1 := r.prog.Commit(t, "v1", map[string]string{"Pulumi.yaml": program("v1", "")})
	r.manifests.Commit(t, "app", manifests(ns, r.prog.URL()))
	prog := r.prog

	app := application("follows-"+ns, ns, r.manifestsURL())
	hold.hold(t) // the first update runs until the sync is seen waiting on it
	if err := c.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	phase := time.Now()
	took := func(what string) {
		t.Logf("%s: %s", what, time.Since(phase).Round(100*time.Millisecond))
		phase = time.Now()
	}
	appKey := client.ObjectKeyFromObject(app)
	stackKey := types.NamespacedName{Namespace: ns, Name: "web"}
	get := func() (*argoappv1.Application, *pulumiv1.Stack) {
		a := &argoappv1.Application{}
		if err := c.Get(ctx, appKey, a); err != nil {
			t.Fatalf("get Application: %v", err)
		}
		s := &pulumiv1.Stack{}
		if err := c.Get(ctx, stackKey, s); err != nil {
			if !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			s = nil
		}
		return a, s
	}
	releasedExists := func() bool {
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "released"}, &corev1.ConfigMap{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	// stackHealth is the Stack's health from Argo CD's API server.
	stackHealth := func() *argocd.Health {
		t.Helper()
		h, err := argo.ResourceHealth(ctx, app.Name, pulumiv1.GroupVersion.WithKind("Stack").GroupKind(), ns, "web")
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	// On failure, what Argo CD and the operator last said (startArgo logs
	// the components' output).
	t.Cleanup(func() {
		if t.Failed() {
			a, s := get()
			t.Logf("Application status: %+v\nStack: %+v", a.Status, s)
		}
	})
	fail := func(what string) { t.Helper(); t.Fatal(what) }
	poll := func(timeout time.Duration, what string, cond func(*argoappv1.Application, *pulumiv1.Stack, *argocd.Health) bool) {
		t.Helper()
		substrate.Eventually(t, timeout, what, func() (bool, error) {
			if err := argo.Exited(); err != nil {
				t.Fatal(err)
			}
			a, s := get()
			// The resource tree is answered from the application
			// controller's cluster cache; until its first sync ends (slow
			// on a loaded machine) the API server answers with "refresh
			// deadline exceeded" or the client times out. That is waiting,
			// not failure: the poll's deadline bounds it.
			h, err := argo.ResourceHealth(ctx, app.Name, pulumiv1.GroupVersion.WithKind("Stack").GroupKind(), ns, "web")
			if err != nil {
				return false, err
			}
			return cond(a, s, h), nil
		})
	}

	// 1. The first sync: while the Stack's first update runs, Argo CD rates
	//    the Stack Progressing and its sync operation waits on it, with
	//    wave 1 not applied yet; then everything is Healthy at the commit.
	//    (The Application as a whole is Missing meanwhile: the worst health
	//    of its resources, and wave 1's ConfigMap does not exist yet. Its
	//    Progressing is seen in step 2, when every resource exists.)
	var sawWaiting bool
	poll(4*time.Minute, "Application Healthy and Synced after the first update", func(a *argoappv1.Application, s *pulumiv1.Stack, h *argocd.Health) bool {
		op := a.Status.OperationState
		if s != nil && !isReady(s) && h != nil && h.Status == "Progressing" && op != nil && op.Phase == "Running" &&
			strings.Contains(op.Message, "waiting for healthy state of pulumi.com/Stack/web") {
			if releasedExists() {
				fail("wave 1 was applied while the sync waits for the Stack of wave 0")
			}
			sawWaiting = true
			hold.release(t)
		}
		return a.Status.Health.Status == "Healthy" && a.Status.Sync.Status == argoappv1.SyncStatusCodeSynced && op != nil && op.Phase == "Succeeded"
	})
	if !sawWaiting {
		fail("never saw the sync waiting for the Stack's health")
	}
	took("Application created → Healthy and Synced")
	a, s := get()
	if !isReady(s) || s.Status.LastUpdate == nil || s.Status.LastUpdate.LastSuccessfulCommit != sha1 {
		fail("Application Healthy but the Stack is not Ready at " + sha1)
	}
	h := stackHealth()
	if h == nil || h.Status != "Healthy" || !strings.Contains(h.Message, sha1[:7]) {
		fail(fmt.Sprintf("the Stack's health from Argo CD's API does not name commit %s: %+v", sha1[:7], h))
	}
	checkVersionDefaults(t, e, a, s, h)
	released := &corev1.ConfigMap{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "released"}, released); err != nil {
		t.Fatalf("wave 1 not applied after the Stack became Healthy: %v", err)
	}
	readyAt := readySince(s)
	if released.CreationTimestamp.Time.Before(readyAt) {
		t.Fatalf("wave 1 created at %s, before the Stack became Ready at %s", released.CreationTimestamp, readyAt)
	}
	if rec, ok := pe.Record(t, "web-"+ns); !ok || rec != "v1" {
		t.Fatalf("record = %q, %v; want v1", rec, ok)
	}

	// 2. A failing program: the Application is Degraded with the failure;
	//    a fix makes it Healthy again.
	prog.Commit(t, "v2 fails", map[string]string{"Pulumi.yaml": program("v2", "update")})
	poll(3*time.Minute, "Application Degraded by the failing update", func(a *argoappv1.Application, _ *pulumiv1.Stack, h *argocd.Health) bool {
		return a.Status.Health.Status == "Degraded" && h != nil && h.Status == "Degraded" && strings.Contains(h.Message, "failOn=update")
	})
	took("failing commit pushed → Application Degraded")
	// The fix's update runs until the Application is seen Progressing (the
	// failing commit's retries still fail at once: failOn comes first).
	hold.hold(t)
	sha3 := prog.Commit(t, "v3 fixed", map[string]string{"Pulumi.yaml": program("v3", "")})
	var sawProgressing bool
	poll(3*time.Minute, "Application Healthy at the fix", func(a *argoappv1.Application, s *pulumiv1.Stack, h *argocd.Health) bool {
		if a.Status.Health.Status == "Progressing" && h != nil && h.Status == "Progressing" && s.Status.CurrentUpdate != nil {
			sawProgressing = true
			hold.release(t)
		}
		return a.Status.Health.Status == "Healthy" && h != nil && strings.Contains(h.Message, sha3[:7]) &&
			s != nil && isReady(s) && s.Status.LastUpdate.LastSuccessfulCommit == sha3
	})

	if !sawProgressing {
		fail("the Application was never Progressing while the fix's update ran")
	}
	took("fix pushed → Application Progressing, then Healthy")

	// 3. reconcile-now through Argo CD's API server: the operator acts on the
	//    request with a new update of the same commit.
	_, s = get()
	before := s.Status.LastUpdate.Name
	if err := argo.RunAction(ctx, app.Name, pulumiv1.GroupVersion.WithKind("Stack"), ns, "web", "reconcile-now"); err != nil {
		t.Fatal(err)
	}
	poll(3*time.Minute, "the reconcile-now action acted on by a new update", func(_ *argoappv1.Application, s *pulumiv1.Stack, _ *argocd.Health) bool {
		req := s.Annotations["pulumi.com/reconciliation-request"]
		return req != "" && s.Status.ObservedReconcileRequest == req && isReady(s) &&
			s.Status.LastUpdate.Name != before && s.Status.LastUpdate.State == "succeeded" && s.Status.LastUpdate.LastSuccessfulCommit == sha3
	})

	took("reconcile-now action → new update succeeded")

	// 4. Deleting the Application deletes its resources; the Stack's
	//    destroyOnFinalize destroys the record before the Stack goes.
	if err := c.Delete(ctx, app); err != nil {
		t.Fatal(err)
	}
	substrate.Eventually(t, 4*time.Minute, "Application, Stack and record gone", func() (bool, error) {
		if err := argo.Exited(); err != nil {
			return false, err
		}
		err := c.Get(ctx, appKey, &argoappv1.Application{})
		if err == nil || !apierrors.IsNotFound(err) {
			return false, client.IgnoreNotFound(err)
		}
		if err := c.Get(ctx, stackKey, &pulumiv1.Stack{}); !apierrors.IsNotFound(err) {
			return false, errors.New("the Application is gone but its Stack is not")
		}
		_, ok := pe.Record(t, "web-"+ns)
		if ok {
			return false, errors.New("the Stack is gone but its record was not destroyed")
		}
		return true, nil
	})
	took("Application deleted → Stack destroyed and gone")
}

// checkVersionDefaults checks that Argo CD ran with its version's defaults,
// on a Healthy Application with a Healthy Stack (health h from the API):
// v3 tracks resources by annotation and does not persist resource health in
// the Application (it keeps it in the resource tree: resourceHealthSource
// appTree); 2.14 persists it there, equal to the API's.
func checkVersionDefaults(t *testing.T, e *argoEnv, a *argoappv1.Application, s *pulumiv1.Stack, h *argocd.Health) {
	t.Helper()
	if id := s.Annotations["argocd.argoproj.io/tracking-id"]; !strings.HasPrefix(id, a.Name+":") {
		t.Errorf("Argo CD %s: the Stack's tracking-id annotation is %q, want annotation tracking of Application %s", e.build.Version, id, a.Name)
	}
	persisted, listed := persistedStackHealth(a, "web")
	if !listed {
		t.Fatalf("Argo CD %s: the Application's status does not list the Stack: %+v", e.build.Version, a.Status.Resources)
	}
	switch e.build.Major() {
	case 3:
		if persisted != nil || a.Status.ResourceHealthSource != argoappv1.ResourceHealthLocationAppTree {
			t.Errorf("Argo CD %s: resource health persisted in the Application (%+v, resourceHealthSource %q); v3's default keeps it in the resource tree only",
				e.build.Version, persisted, a.Status.ResourceHealthSource)
		}
	default:
		if persisted == nil || string(persisted.Status) != h.Status || persisted.Message != h.Message {
			t.Errorf("Argo CD %s: the Stack's health persisted in the Application is %+v, want what the API says: %+v", e.build.Version, persisted, h)
		}
	}
}

func isReady(s *pulumiv1.Stack) bool {
	if s == nil {
		return false
	}
	for _, c := range s.Status.Conditions {
		if c.Type == pulumiv1.ReadyCondition {
			return c.Status == metav1.ConditionTrue && c.ObservedGeneration == s.Generation
		}
	}
	return false
}

func readySince(s *pulumiv1.Stack) time.Time {
	for _, c := range s.Status.Conditions {
		if c.Type == pulumiv1.ReadyCondition {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}
