// Package kargo runs the real Kargo (v1.11.2, built by `hack/substrate.sh
// kargo` from the shared source in ../shared/kargo/src) against a local
// control plane, for the Kargo end-to-end tests and `make demo`: its
// controller, its Kubernetes webhooks server (registered with the API server
// through envtest's webhook install options, with a serving certificate) and
// its management controller (which sets up Projects), each a process.
//
// Each process gets the settings Kargo's Helm chart gives its pod
// (charts/kargo/templates/*/configmap.yaml at v1.11.2, with the chart's
// default values) and a kubeconfig user named like the chart's
// ServiceAccount, so that the webhooks tell the control plane's users from
// others as they do in a cluster. The users are in system:masters: the
// chart's RBAC is not installed.
//
// Kargo's git steps run git with GIT_ASKPASS=/usr/local/bin/credential-helper,
// where Kargo's image puts that program. As root, the controller runs in a
// mount namespace of its own in which the cache's build of credential-helper
// is bind-mounted at /usr/local/bin; the machine's /usr/local/bin is not
// touched.
//
// It imports substrate (for the repository root and the build's location),
// fakegithub and hostproxy (the hosts the example reaches by name), and
// analysis/tokensecret (the example's token refresh).
package kargo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// Version is the Kargo release built by hack/substrate.sh.
const Version = "v1.11.2"

// Namespace is Kargo's own namespace (the chart's release namespace): its
// heartbeat Leases live there.
const Namespace = "kargo"

// The namespaces the chart creates besides Kargo's own, with its defaults.
const (
	SystemResourcesNamespace = "kargo-system-resources"
	SharedResourcesNamespace = "kargo-shared-resources"
	ClusterSecretsNamespace  = "kargo-cluster-secrets"
)

// ErrNoSource is returned by Locate when the shared Kargo source is absent: a
// checkout without it builds no Kargo, and tests that run Kargo skip.
var ErrNoSource = errors.New("no Kargo source")

// Build is a located Kargo build.
type Build struct {
	// Binary is Kargo's control plane (`kargo controller`, …).
	Binary string
	// CredentialHelper is Kargo's git askpass program.
	CredentialHelper string
	// CRDs is the directory of Kargo's CRDs of the same version.
	CRDs string
}

// Locate finds the Kargo build (substrate.Paths.Kargo). When it is not built,
// it returns an error wrapping ErrNoSource, with the reason to print when
// skipping, where Kargo's source is absent (so it cannot be built here), and
// otherwise an error naming the command that builds it.
func Locate() (Build, error) {
	p, err := substrate.Locate()
	if err != nil {
		return Build{}, err
	}
	b := Build{Binary: filepath.Join(p.Kargo, "kargo"), CredentialHelper: filepath.Join(p.Kargo, "credential-helper"), CRDs: filepath.Join(p.Kargo, "crds")}
	for _, f := range []string{b.Binary, b.CredentialHelper, b.CRDs} {
		if _, err := os.Stat(f); err != nil {
			src := substrate.KargoSource()
			if _, serr := os.Stat(filepath.Join(src, "go.mod")); serr != nil {
				return Build{}, fmt.Errorf("%w: Kargo's source is not at %s (shared reference data beside the repository root), so Kargo is not built here", ErrNoSource, src)
			}
			return Build{}, fmt.Errorf("kargo %s not built (%v): run `./hack/substrate.sh kargo` (`./hack/substrate.sh plan kargo` says how long it takes)", Version, err)
		}
	}
	return b, nil
}

// InstallCRDs installs Kargo's CRDs (Project, Warehouse, Stage, Freight, …).
func (b Build) InstallCRDs(env *envtest.Environment) error {
	return substrate.InstallCRDs(env, b.CRDs)
}

// Options configure a running Kargo.
type Options struct {
	// Build is the located binary and CRDs (installed already).
	Build Build
	// Env is the control plane; users are added to it for Kargo's kubeconfigs.
	Env *envtest.Environment
	// Client creates Kargo's namespaces.
	Client client.Client
	// Dir holds the processes' state and logs (one <component>.log each).
	Dir string
	// ArgoCD enables the Argo CD integration (Applications in namespace
	// argocd), Rollouts the Argo Rollouts one (verification with AnalysisRuns).
	ArgoCD, Rollouts bool
	// AllowCredentialsOverHTTP lets the controller use git credentials for
	// http:// repositories (the chart's controller.allowCredentialsOverHTTP).
	AllowCredentialsOverHTTP bool
	// HTTPProxy, when set, is the controller's http_proxy (and git's):
	// plain-HTTP requests to hosts other than loopback go through it. See
	// hostproxy.
	HTTPProxy string
	// LogLevel is the components' LOG_LEVEL (default INFO, the chart's).
	LogLevel string
	// Log, when set, also receives the processes' output.
	Log io.Writer
}

// Instance is a running Kargo.
type Instance struct {
	// Webhooks are the installed webhook options (serving address, CA).
	Webhooks envtest.WebhookInstallOptions

	mu    sync.Mutex
	procs []*process
}

type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  string
}

// The kubeconfig users, named like the chart's ServiceAccounts so that
// CONTROLPLANE_USER_REGEX matches the control plane's components.
func serviceAccountUser(component string) string {
	return "system:serviceaccount:" + Namespace + ":kargo-" + component
}

// Start creates Kargo's namespaces, registers its webhooks, and starts the
// webhooks server, the management controller and the controller, returning
// once the webhooks server answers and the controller has written its
// heartbeat Lease. Stop stops them.
func Start(ctx context.Context, o Options) (_ *Instance, err error) {
	if o.LogLevel == "" {
		o.LogLevel = "INFO"
	}
	for _, d := range []string{"tmp", "home"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	for _, ns := range []string{Namespace, SystemResourcesNamespace, SharedResourcesNamespace, ClusterSecretsNamespace} {
		if err := o.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create namespace %s: %w", ns, err)
		}
	}
	in := &Instance{}
	defer func() {
		if err != nil {
			in.Stop()
		}
	}()
	kubeconfig := func(component string) (string, error) {
		user, err := o.Env.AddUser(envtest.User{Name: serviceAccountUser(component), Groups: []string{"system:masters"}}, nil)
		if err != nil {
			return "", err
		}
		b, err := user.KubeConfig()
		if err != nil {
			return "", err
		}
		path := filepath.Join(o.Dir, component+".kubeconfig")
		return path, os.WriteFile(path, b, 0o600)
	}
	// The webhooks: envtest points them at a loopback port with a CA of its
	// own; the server finds the certificate where controller-runtime looks,
	// $TMPDIR/k8s-webhook-server/serving-certs.
	mutating, validating := webhookConfigurations()
	in.Webhooks = envtest.WebhookInstallOptions{
		MutatingWebhooks:   []*admissionv1.MutatingWebhookConfiguration{mutating},
		ValidatingWebhooks: []*admissionv1.ValidatingWebhookConfiguration{validating},
	}
	if err := in.Webhooks.PrepWithoutInstalling(); err != nil {
		return nil, fmt.Errorf("prepare Kargo's webhooks: %w", err)
	}
	certDir := filepath.Join(o.Dir, "tmp", "k8s-webhook-server", "serving-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	for _, f := range []string{"tls.crt", "tls.key"} {
		b, err := os.ReadFile(filepath.Join(in.Webhooks.LocalServingCertDir, f))
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(certDir, f), b, 0o600); err != nil {
			return nil, err
		}
	}

	common := []string{
		"HOME=" + filepath.Join(o.Dir, "home"),
		"TMPDIR=" + filepath.Join(o.Dir, "tmp"),
		"PATH=" + os.Getenv("PATH"),
		"LOG_LEVEL=" + o.LogLevel,
		"LOG_FORMAT=CONSOLE",
		"KARGO_NAMESPACE=" + Namespace,
		"SYSTEM_RESOURCES_NAMESPACE=" + SystemResourcesNamespace,
		"SHARED_RESOURCES_NAMESPACE=" + SharedResourcesNamespace,
		"GIT_CONFIG_NOSYSTEM=1",
	}

	kc, err := kubeconfig("webhooks-server")
	if err != nil {
		return nil, err
	}
	webhooks, err := in.start(o, "kubernetes-webhooks-server", false, append(common,
		"KUBECONFIG="+kc,
		"WEBHOOK_SERVER_PORT="+strconv.Itoa(in.Webhooks.LocalServingPort),
		"CONTROLPLANE_USER_REGEX=^system:serviceaccount:"+Namespace+":(kargo-api|kargo-controller|kargo-garbage-collector|kargo-management-controller)$",
		"MANAGEMENT_CONTROLLER_USERNAME="+serviceAccountUser("management-controller"),
		"EXTERNAL_WEBHOOKS_SERVER_USERNAME="+serviceAccountUser("external-webhooks-server"),
		"CACHE_BY_TAG_POLICY=Allow",
	))
	if err != nil {
		return nil, err
	}
	if err := waitListening(ctx, webhooks, net.JoinHostPort(in.Webhooks.LocalServingHost, strconv.Itoa(in.Webhooks.LocalServingPort))); err != nil {
		return nil, err
	}
	if err := in.Webhooks.Install(o.Env.Config); err != nil {
		return nil, fmt.Errorf("register Kargo's webhooks: %w", err)
	}

	if kc, err = kubeconfig("management-controller"); err != nil {
		return nil, err
	}
	if _, err := in.start(o, "management-controller", false, append(common,
		"KUBECONFIG="+kc,
		// Not run here: only named in ProjectConfig webhook receivers' URLs.
		"EXTERNAL_WEBHOOK_SERVER_BASE_URL=http://kargo-external-webhooks-server."+Namespace+".svc",
		"CLUSTER_SECRETS_NAMESPACE="+ClusterSecretsNamespace,
		"MAX_CONCURRENT_NAMESPACE_RECONCILES=4", "MAX_CONCURRENT_PROJECT_RECONCILES=4",
		"MAX_CONCURRENT_PROJECT_CONFIG_RECONCILES=4", "MAX_CONCURRENT_SERVICE_ACCOUNT_RECONCILES=4",
	)); err != nil {
		return nil, err
	}

	if kc, err = kubeconfig("controller"); err != nil {
		return nil, err
	}
	env := append(common,
		"KUBECONFIG="+kc,
		"IS_DEFAULT_CONTROLLER=true",
		"ALLOW_CREDENTIALS_OVER_HTTP="+strconv.FormatBool(o.AllowCredentialsOverHTTP),
		"GITCLIENT_NAME=Kargo", "GITCLIENT_EMAIL=no-reply@kargo.io",
		"GIT_PUSH_INTEGRATION_POLICY=AlwaysRebase", "GITCLIENT_SIGNING_KEY_TYPE=gpg",
		"GITHUB_PUSH_MAX_REVISIONS=10", "GITHUB_PUSH_VERIFY_UNTRUSTED_COMMITS=false",
		"CACHE_BY_TAG_POLICY=Allow", "MAX_IMAGE_CACHE_ENTRIES=100000", "IMAGE_REGISTRY_RATE_LIMIT=20",
		"MAX_OCI_PUSH_ARTIFACT_SIZE=1073741824",
		"ARGOCD_INTEGRATION_ENABLED="+strconv.FormatBool(o.ArgoCD),
		// Argo CD is on the same control plane; unset, Kargo would look for
		// an in-cluster configuration.
		"ARGOCD_KUBECONFIG="+kc,
		"ARGOCD_NAMESPACE=argocd", "ARGOCD_WATCH_ARGOCD_NAMESPACE_ONLY=false",
		"ROLLOUTS_INTEGRATION_ENABLED="+strconv.FormatBool(o.Rollouts), "ROLLOUTS_CONTROLLER_INSTANCE_ID=",
		"MAX_CONCURRENT_CONTROL_FLOW_RECONCILES=4", "MAX_CONCURRENT_PROMOTION_RECONCILES=4",
		"MAX_CONCURRENT_STAGE_RECONCILES=4", "MAX_CONCURRENT_WAREHOUSE_RECONCILES=4",
		"MIN_WAREHOUSE_RECONCILIATION_INTERVAL=5m0s",
	)
	if o.HTTPProxy != "" {
		// Kargo passes the lowercase variables on to git; Go reads either.
		// Loopback is never proxied (Go skips it; curl needs no_proxy).
		env = append(env, "http_proxy="+o.HTTPProxy, "HTTP_PROXY="+o.HTTPProxy, "no_proxy=127.0.0.1,localhost", "NO_PROXY=127.0.0.1,localhost")
	}
	if _, err := in.start(o, "controller", true, env); err != nil {
		return nil, err
	}
	if err := in.waitHeartbeat(ctx, o.Client); err != nil {
		return nil, err
	}
	return in, nil
}

// waitHeartbeat waits until the controller has written its heartbeat Lease in
// Kargo's namespace (its manager has started), failing at once if it exits.
func (in *Instance) waitHeartbeat(ctx context.Context, c client.Client) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		leases := &coordinationv1.LeaseList{}
		if err := c.List(ctx, leases, client.InNamespace(Namespace), client.HasLabels{"kargo.akuity.io/controller"}); err == nil && len(leases.Items) > 0 {
			return nil
		}
		if err := in.Exited(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the Kargo controller wrote no heartbeat Lease in namespace %s in 2 minutes: %s", Namespace, in.Logs(3000))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop stops the processes (SIGTERM, then SIGKILL after 10 s), newest first,
// and removes the webhooks' certificates.
func (in *Instance) Stop() {
	in.mu.Lock()
	procs := in.procs
	in.procs = nil
	in.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	_ = in.Webhooks.Cleanup()
}

// Exited reports a component that has exited, with the tail of its log; nil
// while all run.
func (in *Instance) Exited() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, p := range in.procs {
		select {
		case <-p.done:
			return fmt.Errorf("kargo %s exited (%v): %s", p.name, p.err, substrate.Tail(p.log, 2000))
		default:
		}
	}
	return nil
}

// Logs returns the tail of every component's log, for a failing test.
func (in *Instance) Logs(n int) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	var b strings.Builder
	for _, p := range in.procs {
		fmt.Fprintf(&b, "---- kargo %s (%s)\n%s\n", p.name, p.log, substrate.Tail(p.log, n))
	}
	return b.String()
}

// LogPath is the log file of a component ("controller", …).
func (in *Instance) LogPath(component string) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, p := range in.procs {
		if p.name == component {
			return p.log
		}
	}
	return ""
}

// start runs `kargo <name>`; withHelper runs it where credential-helper is
// at /usr/local/bin (see the package doc).
func (in *Instance) start(o Options, name string, withHelper bool, env []string) (*process, error) {
	logPath := filepath.Join(o.Dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd, err := command(o.Build, withHelper, name)
	if err != nil {
		f.Close()
		return nil, err
	}
	cmd.Env = env
	cmd.Dir = o.Dir
	var out io.Writer = f
	if o.Log != nil {
		out = io.MultiWriter(f, substrate.PrefixWriter(o.Log, "kargo "+name))
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start kargo %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	in.mu.Lock()
	in.procs = append(in.procs, p)
	in.mu.Unlock()
	return p, nil
}

// credentialHelperPath is where Kargo's git steps expect credential-helper.
const credentialHelperPath = "/usr/local/bin/credential-helper"

// command is `kargo <sub>`, made to die with its parent; with withHelper, in
// a mount namespace where the build's credential-helper is at
// /usr/local/bin, unless one is there already.
func command(b Build, withHelper bool, sub string) (*exec.Cmd, error) {
	if !withHelper || sameFile(credentialHelperPath, b.CredentialHelper) {
		cmd := exec.Command(b.Binary, sub)
		cmd.SysProcAttr = substrate.ChildProcAttr(false)
		return cmd, nil
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("kargo's git steps run %s (where Kargo's image has it) to pass git credentials: run as root, so that the controller gets it in a mount namespace of its own, or install it: ln -s %s %s",
			credentialHelperPath, b.CredentialHelper, credentialHelperPath)
	}
	// /bin/sh, in the new mount namespace (made private by Go, so nothing
	// propagates to the machine), bind-mounts the build's directory over
	// /usr/local/bin and becomes the controller.
	cmd := exec.Command("/bin/sh", "-c", `mount --bind "$1" /usr/local/bin && exec "$2" "$3"`, "sh", filepath.Dir(b.CredentialHelper), b.Binary, sub)
	cmd.SysProcAttr = substrate.ChildProcAttr(true)
	return cmd, nil
}

func sameFile(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}

// waitListening waits until addr accepts connections, failing at once if
// the process exits.
func waitListening(ctx context.Context, p *process, addr string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("kargo %s exited before listening on %s (%v): %s", p.name, addr, p.err, substrate.Tail(p.log, 3000))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kargo %s not listening on %s after 2 minutes: %s", p.name, addr, substrate.Tail(p.log, 3000))
		}
	}
}
