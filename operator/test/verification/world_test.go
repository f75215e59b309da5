package verification

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/stackflow-io/stackflow/analysis/pulumicloud/cloudtest"
	"github.com/stackflow-io/stackflow/analysis/service"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/local"
	"github.com/stackflow-io/stackflow/test/framework/rollouts"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

var (
	cp *substrate.ControlPlane
	// bin holds the agent and stackflow-kargo built for this run.
	bin string
	// rolloutsBuild is rollouts-controller and its CRDs (make substrate).
	rolloutsBuild rollouts.Build
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	var err error
	if rolloutsBuild, err = rollouts.Locate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if bin, err = os.MkdirTemp("", "stackflow-verification-bin-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(bin)
	for name, pkg := range map[string]string{"agent": "./operator/cmd/agent", "stackflow-kargo": "./kargo-steps/cmd/stackflow-kargo"} {
		build := exec.Command("go", "build", "-o", filepath.Join(bin, name), pkg)
		build.Dir = substrate.RepoRoot()
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", name, err, out)
			return 1
		}
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	if cp, err = substrate.StartControlPlane(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cp.Stop()
	if err := rolloutsBuild.InstallCRDs(cp.Env); err != nil {
		fmt.Fprintf(os.Stderr, "install Argo Rollouts CRDs: %v\n", err)
		return 1
	}
	return m.Run()
}

// scheme adds Argo Rollouts' types to the test client's.
func scheme() *runtime.Scheme {
	s := substrate.Scheme()
	if err := rolloutsv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// world is one test's running system.
type world struct {
	ns     string
	c      client.Client
	pe     *substrate.Pulumi
	url    string // the analysis service
	token  string // a ServiceAccount token allowed to read the namespace's Stacks
	denied string // a ServiceAccount token allowed nothing
	// cloud is the faithful Pulumi Cloud the service's /v1/pulumi routes
	// ask, with the access token stored in a Secret.
	cloud *cloudtest.Server
}

// cloudToken is the Pulumi access token the fake Pulumi Cloud accepts.
const cloudToken = "pul-0123456789abcdef0123456789abcdef01234567"

// newWorld starts the operator, the analysis service and, with rollouts,
// the Argo Rollouts controller.
func newWorld(t *testing.T, rollouts bool) *world {
	t.Helper()
	c, err := client.New(cp.Config, client.Options{Scheme: scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{ns: cp.Namespace(t), c: c, pe: substrate.NewPulumi(t)}
	w.startOperator(t)
	w.cloud = cloudtest.NewTB(t, cloudToken)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "pulumi-cloud"}, StringData: map[string]string{service.PulumiCloudTokenKey: cloudToken}}
	if err := c.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	w.url = startAnalysis(t, service.Options{PulumiCloudTokenSecret: w.ns + "/pulumi-cloud", PulumiCloudURL: w.cloud.URL, PulumiCloudCacheTTL: time.Second})
	w.token, w.denied = w.tokens(t)
	if rollouts {
		startRollouts(t)
	}
	return w
}

func (w *world) startOperator(t *testing.T) {
	t.Helper()
	root := t.TempDir()
	t.Cleanup(func() { local.StopAll(root) })
	opts := operator.Options{
		Runtime: operator.RuntimeLocal, LocalRoot: root, AgentBinary: filepath.Join(bin, "agent"),
		PulumiRoot: w.pe.Paths.PulumiRoot, AgentEnv: w.pe.EnvVars(), WorkspaceWorkers: 4, UpdateWorkers: 4, StackWorkers: 4,
		ArtifactDir: t.TempDir(), StackResyncOverride: time.Second, WatchNamespaces: []string{w.ns},
	}
	operatortest.StartOperator(t, cp.Config, opts)
}

// startAnalysis runs the analysis service in this process, with Kubernetes
// authentication, and returns its URL once its caches have synced.
func startAnalysis(t *testing.T, o service.Options) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		o.Auth, o.AuthCacheTTL, o.Config, o.Listener, o.Log, o.Ready = service.AuthKube, 10*time.Second, cp.Config, ln, ctrl.Log.WithName("analysis"), ready
		done <- service.Run(ctx, o)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("analysis service: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("analysis service: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("analysis service caches not synced in a minute")
	}
	return "http://" + ln.Addr().String()
}

// tokens makes two ServiceAccounts and real tokens for them: "verifier",
// bound to get stacks in the namespace (as analysis/config/kargo-project
// does), and "stranger", bound to nothing. The verifier's token is also
// stored where the templates read it by default (Secret
// stackflow-verifier-token, key token).
func (w *world) tokens(t *testing.T) (allowed, denied string) {
	t.Helper()
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(cp.Config)
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "stack-verifier"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"pulumi.com"}, Resources: []string{"stacks"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "stack-verifier"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "stack-verifier"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "verifier", Namespace: w.ns}}}
	for _, o := range []client.Object{role, binding,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "verifier"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "stranger"}}} {
		if err := w.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	token := func(sa string) string {
		// For the service's audience: it refuses the API server's own.
		tr, err := cs.CoreV1().ServiceAccounts(w.ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences: []string{service.DefaultAudience}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token for %s: %v", sa, err)
		}
		return tr.Status.Token
	}
	allowed, denied = token("verifier"), token("stranger")
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "stackflow-verifier-token"}, StringData: map[string]string{"token": allowed}}
	if err := w.c.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	return allowed, denied
}

// startRollouts runs the real Argo Rollouts controller (its analysis
// controller) against the control plane until the test ends.
func startRollouts(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctl, err := rollouts.Start(ctx, rollouts.Options{Build: rolloutsBuild, Env: cp.Env, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctl.Stop()
		if t.Failed() {
			t.Logf("rollouts-controller log (last lines):\n%s", substrate.Tail(ctl.LogPath, 6000))
		}
	})
}

// eventually polls cond until it returns true or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	substrate.Eventually(t, timeout, what, cond)
}
