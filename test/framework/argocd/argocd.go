// Package argocd runs the real Argo CD against a local control plane, for the
// Argo CD end-to-end tests and `make demo`: the application controller, the
// repo server and the API server, each a process of the components binary
// that `make substrate` builds (hack/tools/argocd for v2.14, hack/tools/argo
// for v3), sharing an in-process Redis (miniredis) on loopback.
//
// argocd-cm is the one the version's install manifests ship (v3's carries its
// defaults, e.g. ignoring /status updates), with Stackflow's health checks and
// actions applied exactly as argocd-health/install/kustomize ships them: the
// kustomize Component is built with kustomize's API, and the result applied.
// Nothing else is configured: each version runs with its own defaults (v3:
// annotation tracking, resource health not persisted in the Application).
//
// The API server runs as a real install runs it: as the ServiceAccount
// argocd-server of the argocd namespace, with the RBAC of the version's own
// manifests (Build.ServerRBAC) and argocd-health's (it creates the
// PlanApprovals of the approve and reject actions); the other components
// run as a system:masters user. A build without that RBAC (v2.14) runs the
// API server as that user too.
package argocd

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// Namespace is where Argo CD runs and its Applications live.
const Namespace = "argocd"

// Version selects one of the substrate's Argo CD builds.
type Version string

const (
	// V3 is the newest Argo CD v3 that builds as a Go dependency
	// (hack/tools/argo; see hack/gen-tools-argo-kargo.sh).
	V3 Version = "3"
	// V2 is Argo CD v2.14 (hack/tools/argocd).
	V2 Version = "2.14"
)

// Versions are the builds the e2e runs against, newest first.
var Versions = []Version{V3, V2}

// ParseVersion reads a version as a user names it: 3 or 2.14, with or
// without a leading v.
func ParseVersion(s string) (Version, error) {
	for _, v := range Versions {
		if strings.TrimPrefix(s, "v") == string(v) {
			return v, nil
		}
	}
	return "", fmt.Errorf("unknown Argo CD version %q: use 3 or 2.14", s)
}

// EnvDir names the environment variable that overrides where the build of
// the version is (by default, where `./hack/substrate.sh env` says).
func (v Version) EnvDir() string {
	if v == V3 {
		return "STACKFLOW_ARGOCD3"
	}
	return "STACKFLOW_ARGOCD"
}

// tool is the substrate.sh tool that builds the version.
func (v Version) tool() string {
	if v == V3 {
		return "argocd3"
	}
	return "argocd"
}

// Build is a located Argo CD build.
type Build struct {
	// Version is the build's version, e.g. v3.2.11.
	Version string
	// Binary is the components binary `argocd` (ARGOCD_BINARY_NAME picks the
	// component).
	Binary string
	// CRDs is the directory of Argo CD's CRDs of the same version.
	CRDs string
	// ConfigMap is the argocd-cm the version's install manifests ship.
	ConfigMap string
	// ServerRBAC is the directory of the RBAC the version's install
	// manifests give the API server (ClusterRole, Role and bindings
	// argocd-server); empty in a build made before the substrate kept it.
	ServerRBAC string
	// UI says whether the API server embeds Argo CD's web UI (built by
	// `./hack/substrate.sh argocd3-ui`; absent where ../shared/argo-ui is).
	UI bool
}

// Major is the build's major version (2 or 3).
func (b Build) Major() int {
	if strings.HasPrefix(b.Version, "v2.") {
		return 2
	}
	return 3
}

// Locate finds the build of Argo CD version v where `./hack/substrate.sh
// env` says it is (through substrate.Locate, so that nothing needs to be
// exported), or in the directory named by v.EnvDir() when that is set, with
// an error saying how to build it.
func Locate(v Version) (Build, error) {
	dir := os.Getenv(v.EnvDir())
	if dir == "" {
		p, err := substrate.Locate()
		if err != nil {
			return Build{}, err
		}
		dir = p.ArgoCD
		if v == V3 {
			dir = p.ArgoCD3
		}
	}
	if dir == "" {
		return Build{}, fmt.Errorf("hack/substrate.sh env names no directory for Argo CD %s (%s)", v, v.EnvDir())
	}
	b := Build{Binary: filepath.Join(dir, "argocd"), CRDs: filepath.Join(dir, "crds"), ConfigMap: filepath.Join(dir, "argocd-cm.yaml")}
	if _, err := os.Stat(filepath.Join(dir, "server-rbac")); err == nil {
		b.ServerRBAC = filepath.Join(dir, "server-rbac")
	}
	if _, err := os.Stat(filepath.Join(dir, "ui-embedded")); err == nil {
		b.UI = true
	}
	version, err := os.ReadFile(filepath.Join(dir, "VERSION"))
	if err == nil {
		b.Version = strings.TrimSpace(string(version))
	}
	for _, p := range []string{filepath.Join(dir, ".complete"), b.Binary, b.CRDs, b.ConfigMap} {
		if _, err := os.Stat(p); err != nil {
			return Build{}, fmt.Errorf("Argo CD %s not built in %s (%v): run `./hack/substrate.sh %s` (or `make substrate`)", v, dir, err, v.tool())
		}
	}
	if err != nil {
		return Build{}, fmt.Errorf("Argo CD %s in %s: %w", v, dir, err)
	}
	return b, nil
}

// LocateOrSkip is Locate for a test. Argo CD v2.14, past end of life, is
// not in make test's substrate (19 CPU-minutes cold): where it is not built,
// the test is skipped saying how to run it (make test-argocd-2.14); v3 must
// be built, and a missing v3 fails the test.
func LocateOrSkip(t testing.TB, v Version) Build {
	t.Helper()
	build, err := Locate(v)
	if err != nil && v == V2 {
		t.Skipf("Argo CD v2.14 is not built, so this runs on v3 only (make test leaves v2.14 out of its substrate; `make test-argocd-2.14` builds it and runs these tests): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return build
}

// InstallCRDs installs Argo CD's CRDs (Application, ApplicationSet, AppProject).
func (b Build) InstallCRDs(env *envtest.Environment) error {
	return substrate.InstallCRDs(env, b.CRDs)
}

// Options configure a running Argo CD.
type Options struct {
	// Build is the located binary and CRDs.
	Build Build
	// Env is the control plane; a system:masters user is added to it for Argo
	// CD's kubeconfig.
	Env *envtest.Environment
	// Client writes argocd-cm and argocd-secret.
	Client client.Client
	// Dir holds the processes' state and logs (one <component>.log each).
	Dir string
	// RepoRoot is the Stackflow repository (for argocd-health/install).
	RepoRoot string
	// AppResync is how often the controller re-reads git for every
	// Application (Argo CD's default is 3 minutes); 0 means 10 s.
	AppResync time.Duration
	// Log, when set, also receives the processes' output.
	Log io.Writer
	// Accounts are Argo CD local users (name → password), each able to log
	// in (accounts.<name>: login). With any, authentication is on: every API
	// request needs a session (Login), and RBACPolicy decides what each user
	// may do. Without, the API server runs with --disable-auth.
	Accounts map[string]string
	// RBACPolicy is argocd-rbac-cm's policy.csv (no default role).
	RBACPolicy string
	// TLS serves the API server (and the UI) over HTTPS with a self-signed
	// certificate for 127.0.0.1 (Instance.CACert), so that a browser talks
	// HTTP/2 to it: over plain HTTP/1.1 the UI's watch streams hold the six
	// connections a browser opens to one host, and its next requests (a
	// resource's details panel) never leave. Without, plain HTTP
	// (--insecure).
	TLS bool
}

// Instance is a running Argo CD.
type Instance struct {
	// CACert is the API server's self-signed certificate (PEM) with
	// Options.TLS, else nil.
	CACert []byte
	// APIURL is the API server's base URL (https with Options.TLS, else plain HTTP; authentication
	// disabled: loopback only).
	APIURL string
	// RedisAddr is the Redis the components share.
	RedisAddr string
	// Kubeconfig is the file the components use.
	Kubeconfig string
	// ServerKubeconfig is the API server's: the ServiceAccount
	// argocd-server's where the build has its RBAC (Build.ServerRBAC), else
	// Kubeconfig.
	ServerKubeconfig string

	// token authenticates API requests (As).
	token string

	redis *miniredis.Miniredis
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

// Start installs argocd-cm (with Stackflow's health checks and actions) and
// argocd-secret in the argocd namespace, then starts Redis, the repo server,
// the application controller and the API server, and returns once each
// answers on its port. Stop stops them.
func Start(ctx context.Context, o Options) (_ *Instance, err error) {
	if o.AppResync == 0 {
		o.AppResync = 10 * time.Second
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	tlsCert, err := installSettings(ctx, o)
	if err != nil {
		return nil, err
	}
	in := &Instance{}
	defer func() {
		if err != nil {
			in.Stop()
		}
	}()
	if in.Kubeconfig, err = substrate.WriteKubeconfig(o.Env, filepath.Join(o.Dir, "kubeconfig")); err != nil {
		return nil, err
	}
	in.ServerKubeconfig = in.Kubeconfig
	if o.Build.ServerRBAC != "" {
		if in.ServerKubeconfig, err = serverServiceAccount(ctx, o); err != nil {
			return nil, err
		}
	}
	if in.redis, err = miniredis.Run(); err != nil {
		return nil, fmt.Errorf("start redis: %w", err)
	}
	in.RedisAddr = in.redis.Addr()

	ports, err := substrate.FreePorts(5)
	if err != nil {
		return nil, err
	}
	repoPort, repoMetrics, ctrlMetrics, apiPort, apiMetrics := ports[0], ports[1], ports[2], ports[3], ports[4]
	repoAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(repoPort))
	for _, d := range []string{"tls", "ssh", "gpg/keys", "gpg/source", "plugins", "tmp"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	env := []string{
		"KUBECONFIG=" + in.Kubeconfig,
		// The in-cluster destination (https://kubernetes.default.svc) is the
		// control plane of KUBECONFIG.
		"ARGOCD_FAKE_IN_CLUSTER=true",
		"ARGOCD_TLS_DATA_PATH=" + filepath.Join(o.Dir, "tls"),
		"ARGOCD_SSH_DATA_PATH=" + filepath.Join(o.Dir, "ssh"),
		"ARGOCD_GNUPGHOME=" + filepath.Join(o.Dir, "gpg/keys"),
		"ARGOCD_GPG_DATA_PATH=" + filepath.Join(o.Dir, "gpg/source"),
		"ARGOCD_GPG_ENABLED=false",
		"ARGOCD_PLUGINSOCKFILEPATH=" + filepath.Join(o.Dir, "plugins"),
		"TMPDIR=" + filepath.Join(o.Dir, "tmp"),
		"HOME=" + o.Dir,
		// The repo server runs git with GIT_ASKPASS=argocd (the components
		// binary as argocd-git-ask-pass) when a repository has credentials.
		"PATH=" + filepath.Dir(o.Build.Binary) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"GIT_CONFIG_NOSYSTEM=1",
	}
	common := []string{"--loglevel", "info", "--redis", in.RedisAddr}
	start := func(name string, args []string, port int, extraEnv ...string) error {
		p, err := in.start(o, name, append(append([]string{}, env...), extraEnv...), append(append([]string{}, common...), args...))
		if err != nil {
			return err
		}
		return waitListening(ctx, p, port)
	}
	if err := start("argocd-repo-server", []string{
		"--address", "127.0.0.1", "--port", strconv.Itoa(repoPort), "--metrics-address", "127.0.0.1", "--metrics-port", strconv.Itoa(repoMetrics),
		"--disable-tls",
	}, repoPort); err != nil {
		return nil, err
	}
	if err := start("argocd-application-controller", []string{
		"--kubeconfig", in.Kubeconfig, "--namespace", Namespace, "--repo-server", repoAddr, "--repo-server-plaintext",
		"--metrics-port", strconv.Itoa(ctrlMetrics),
		"--app-resync", strconv.Itoa(int(o.AppResync.Seconds())), "--self-heal-timeout-seconds", "2",
		"--status-processors", "4", "--operation-processors", "4",
	}, ctrlMetrics); err != nil {
		return nil, err
	}
	serverArgs := []string{
		"--kubeconfig", in.ServerKubeconfig, "--namespace", Namespace, "--repo-server", repoAddr, "--repo-server-plaintext",
		"--address", "127.0.0.1", "--port", strconv.Itoa(apiPort), "--metrics-port", strconv.Itoa(apiMetrics),
		"--dex-server", "http://127.0.0.1:1",
	}
	if !o.TLS {
		serverArgs = append(serverArgs, "--insecure")
	}
	if len(o.Accounts) == 0 {
		serverArgs = append(serverArgs, "--disable-auth")
	}
	// The in-cluster destination's credentials come from KUBECONFIG (the
	// resource actions' patches and creations use them).
	if err := start("argocd-server", serverArgs, apiPort, "KUBECONFIG="+in.ServerKubeconfig); err != nil {
		return nil, err
	}
	in.APIURL = "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(apiPort))
	if o.TLS {
		in.APIURL = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(apiPort))
		in.CACert = tlsCert
	}
	return in, nil
}

// Stop stops the processes (SIGTERM, then SIGKILL after 10 s) and Redis.
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
	if in.redis != nil {
		in.redis.Close()
	}
}

// Exited reports a component that has exited, with the tail of its log; nil
// while all run.
func (in *Instance) Exited() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, p := range in.procs {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v): %s", p.name, p.err, substrate.Tail(p.log, 2000))
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
		fmt.Fprintf(&b, "---- %s (%s)\n%s\n", p.name, p.log, substrate.Tail(p.log, n))
	}
	return b.String()
}

func (in *Instance) start(o Options, name string, env, args []string) (*process, error) {
	logPath := filepath.Join(o.Dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.Build.Binary, args...)
	cmd.Env = append(append([]string{}, env...), "ARGOCD_BINARY_NAME="+name)
	cmd.Dir = o.Dir
	var out io.Writer = f
	if o.Log != nil {
		out = io.MultiWriter(f, substrate.PrefixWriter(o.Log, name))
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = substrate.ChildProcAttr(false)
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
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

// waitListening waits until the process accepts connections on port, failing
// at once if it exits.
func waitListening(ctx context.Context, p *process, port int) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before listening on %s (%v): %s", p.name, addr, p.err, substrate.Tail(p.log, 3000))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening on %s after 2 minutes: %s", p.name, addr, substrate.Tail(p.log, 3000))
		}
	}
}

// ConfigMap renders argocd-cm with argocd-health/install/kustomize applied
// to base (the argocd-cm of an Argo CD install), as a user's kustomization
// installing Argo CD would.
func ConfigMap(repoRoot, base string) (*corev1.ConfigMap, error) {
	dir, err := os.MkdirTemp("", "stackflow-argocd-cm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// kustomize takes components by relative path: the shipped Component's
	// files are copied, unchanged, into ./stackflow-health.
	component := filepath.Join(repoRoot, "argocd-health", "install", "kustomize")
	if err := os.CopyFS(filepath.Join(dir, "stackflow-health"), os.DirFS(component)); err != nil {
		return nil, fmt.Errorf("copy %s: %w", component, err)
	}
	baseCM, err := os.ReadFile(base)
	if err != nil {
		return nil, err
	}
	kustomization := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: %s\nresources:\n- argocd-cm.yaml\ncomponents:\n- stackflow-health\n", Namespace)
	for name, content := range map[string][]byte{"kustomization.yaml": []byte(kustomization), "argocd-cm.yaml": baseCM} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			return nil, err
		}
	}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize argocd-cm with argocd-health/install/kustomize: %w", err)
	}
	out, err := rm.AsYaml()
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{}
	if err := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096).Decode(cm); err != nil {
		return nil, err
	}
	if cm.Name != "argocd-cm" || len(cm.Data) == 0 {
		return nil, fmt.Errorf("kustomize argocd-cm: got %s with %d keys", cm.Name, len(cm.Data))
	}
	return cm, nil
}

// installSettings creates the argocd namespace, argocd-cm and argocd-secret
// (server.secretkey, which every component's settings manager reads).
func installSettings(ctx context.Context, o Options) (tlsCert []byte, err error) {
	c, b, repoRoot := o.Client, o.Build, o.RepoRoot
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	cm, err := ConfigMap(repoRoot, b.ConfigMap)
	if err != nil {
		return nil, err
	}
	cm.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
	if b.Major() == 2 {
		// 2.14 tracks resources by label by default; the e2e has always run
		// it with v3's default, annotation tracking.
		cm.Data["application.resourceTrackingMethod"] = "annotation"
	}
	for name := range o.Accounts {
		cm.Data["accounts."+name] = "login"
	}
	if err := c.Patch(ctx, cm, client.Apply, client.FieldOwner("stackflow-test"), client.ForceOwnership); err != nil {
		return nil, fmt.Errorf("apply argocd-cm: %w", err)
	}
	key := make([]byte, 32)
	if _, err := io.ReadFull(rand.Reader, key); err != nil {
		return nil, err
	}
	sec := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: "argocd-secret", Namespace: Namespace, Labels: map[string]string{"app.kubernetes.io/part-of": "argocd"}},
		Data:       map[string][]byte{"server.secretkey": key},
	}
	if err := addAccounts(sec, o.Accounts); err != nil {
		return nil, err
	}
	if o.TLS {
		var key []byte
		if tlsCert, key, err = loopbackCert(); err != nil {
			return nil, err
		}
		sec.Data["tls.crt"], sec.Data["tls.key"] = tlsCert, key
	}
	if err := c.Create(ctx, sec); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create argocd-secret: %w", err)
	}
	if len(o.Accounts) > 0 {
		rbac := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "argocd-rbac-cm", Namespace: Namespace, Labels: map[string]string{"app.kubernetes.io/part-of": "argocd"}},
			Data:       map[string]string{"policy.csv": o.RBACPolicy, "policy.default": ""},
		}
		if err := c.Create(ctx, rbac); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create argocd-rbac-cm: %w", err)
		}
	}
	return tlsCert, nil
}

// RunAction runs a resource action (e.g. reconcile-now) on a resource of an
// Application through the Argo CD API server, as the UI's and CLI's "Actions"
// menu does.
func (in *Instance) RunAction(ctx context.Context, app string, gvk schema.GroupVersionKind, namespace, name, action string) error {
	q := fmt.Sprintf("namespace=%s&resourceName=%s&group=%s&version=%s&kind=%s&appNamespace=%s",
		namespace, name, gvk.Group, gvk.Version, gvk.Kind, Namespace)
	err := in.call(ctx, http.MethodPost, fmt.Sprintf("/api/v1/applications/%s/resource/actions?%s", app, q), []byte(strconv.Quote(action)), nil)
	if err != nil {
		return fmt.Errorf("run action %s on %s %s/%s of Application %s: %w", action, gvk.Kind, namespace, name, app, err)
	}
	return nil
}

// Health is a resource's health as Argo CD assessed it.
type Health struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

// ResourceHealth reads the health of a resource of an Application from the
// API server's resource tree, as the UI, the CLI and other tools read it:
// Argo CD v3 no longer persists resource health in the Application's status
// (controller.resource.health.persist is false by default). It returns nil
// when the tree has no health for the resource (yet).
func (in *Instance) ResourceHealth(ctx context.Context, app string, gk schema.GroupKind, namespace, name string) (*Health, error) {
	var tree struct {
		Nodes []struct {
			Group     string  `json:"group"`
			Kind      string  `json:"kind"`
			Namespace string  `json:"namespace"`
			Name      string  `json:"name"`
			Health    *Health `json:"health"`
		} `json:"nodes"`
	}
	if err := in.call(ctx, http.MethodGet, fmt.Sprintf("/api/v1/applications/%s/resource-tree?appNamespace=%s", app, Namespace), nil, &tree); err != nil {
		return nil, fmt.Errorf("resource tree of Application %s: %w", app, err)
	}
	for _, n := range tree.Nodes {
		if n.Group == gk.Group && n.Kind == gk.Kind && n.Namespace == namespace && n.Name == name {
			return n.Health, nil
		}
	}
	return nil, nil
}

func tailBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// CheckUI fetches the web UI's page from the API server and fails unless it
// is Argo CD's (the build embeds the UI: Build.UI); it returns the page's
// URL. Like every API request it ends within apiTimeout and reads at most
// 1 MiB.
func (in *Instance) CheckUI(ctx context.Context) (string, error) {
	url := in.APIURL + "/applications"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	// As a browser asks: the server answers a page's path with index.html
	// only for requests accepting HTML.
	req.Header.Set("Accept", "text/html")
	resp, err := in.do(req)
	if err != nil {
		return "", fmt.Errorf("Argo CD UI at %s: %w", url, err)
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("Argo CD UI at %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK || !bytes.Contains(page, []byte("<title>Argo CD</title>")) {
		return "", fmt.Errorf("Argo CD UI at %s: HTTP %d, not Argo CD's page (is the UI embedded in this build?): %.200q", url, resp.StatusCode, page)
	}
	return url, nil
}
