// Package operator assembles the Stackflow operator: the scheme, the workspace
// runtime chosen by the options, the agent client pool and the reconcilers, on a
// controller-runtime manager.
//
// It imports everything under operator/internal; nothing imports it but
// cmd/operator and tests.
package operator

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/time/rate"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	pulumiv1alpha1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1alpha1"
	stackflowv1alpha1 "github.com/stackflow-io/stackflow/operator/api/stackflow/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/agentclient"
	"github.com/stackflow-io/stackflow/operator/internal/artifact"
	"github.com/stackflow-io/stackflow/operator/internal/controller"
	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
	"github.com/stackflow-io/stackflow/operator/internal/gitremote"
	"github.com/stackflow-io/stackflow/operator/internal/gitresolve"
	"github.com/stackflow-io/stackflow/operator/internal/webhook"
	"github.com/stackflow-io/stackflow/operator/internal/workspace"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/local"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/podsecurity"
)

// Runtime names.
const (
	RuntimePod   = "pod"
	RuntimeLocal = "local"
)

// Options configure the operator.
type Options struct {
	// Runtime is "pod" (the default) or "local".
	Runtime string
	// Pod configures the pod runtime.
	Pod pod.Options
	// PodHealth decides when a failing workspace pod stalls its Workspace
	// (zero fields: pod.DefaultThresholds).
	PodHealth pod.Thresholds
	// PodClock is the clock of those thresholds (default time.Now; tests
	// move it).
	PodClock func() time.Time
	// PodSecurity is the lockdown check of workspace pods against their
	// namespace's Pod Security level (default off).
	PodSecurity podsecurity.Mode
	// AgentTokenFile holds the operator's ServiceAccount token for agents
	// when Pod.AgentAuth is pod.AgentAuthKube: a projected token volume
	// with audience Pod.KubeAudience, re-read as the kubelet rotates it.
	AgentTokenFile string
	// AgentTokens, when set, replaces AgentTokenFile (tests).
	AgentTokens agentclient.TokenSource
	// LocalRoot, AgentBinary, PulumiRoot and AgentEnv configure the local
	// runtime.
	LocalRoot   string
	AgentBinary string
	PulumiRoot  string
	AgentEnv    map[string]string
	// LocalRestartBackoff is how long a failed local agent stays down before
	// it is started again (default 30s).
	LocalRestartBackoff time.Duration
	// WorkspaceWorkers, UpdateWorkers and StackWorkers are the controllers'
	// concurrency.
	WorkspaceWorkers int
	UpdateWorkers    int
	StackWorkers     int
	// ArtifactDir holds the Program artifacts (default: a new temporary
	// directory). It need not persist: at start the Program controller
	// publishes every Program again, at the same digests.
	ArtifactDir string
	// ArtifactAddr is the artifact server's listen address (default
	// "127.0.0.1:0", a free loopback port).
	ArtifactAddr string
	// ArtifactBaseURL is where workspaces download artifacts from, such as
	// "http://stackflow-operator.stackflow-system.svc:9090" in a cluster
	// (default: http://127.0.0.1:<port of ArtifactAddr>, for the local runtime).
	ArtifactBaseURL string
	// WatchNamespaces are the namespaces the operator serves (see
	// CacheOptions); main uses it for the manager, Setup does not.
	WatchNamespaces []string
	// WatchLabelSelector, when set, makes this operator one shard: it
	// caches, and so reconciles, only the Stacks, Programs, Workspaces and
	// Updates the selector selects (--watch-label-selector, e.g.
	// "sharding.stackflow.io/key=shard1", or
	// "!sharding.stackflow.io/key" for the default shard). See CacheOptionsFor.
	WatchLabelSelector labels.Selector
	// GitPollInterval is how long a branch listing is shared by every Stack
	// (default 1m); with the push webhook it can be relaxed to 5–10m.
	GitPollInterval time.Duration
	// WebhookAddr, when set, serves the GitHub push receiver at
	// /webhooks/github, authenticated with WebhookSecret.
	WebhookAddr   string
	WebhookSecret string
	// StackResyncOverride replaces every Stack's resync interval (tests and
	// local demos; the CRD's minimum is 60 s).
	StackResyncOverride time.Duration
	// SecretPollInterval is how often an up-to-date Stack re-reads the
	// Secrets it refers to (default controller.DefaultSecretPoll): Secrets
	// are read by name from the API server, never listed or watched.
	SecretPollInterval time.Duration
	// UpdateHistory is how many finished Updates each Stack keeps
	// (controller.DefaultUpdateHistory when 0; negative keeps all).
	UpdateHistory int
	// WorkspaceIdleTimeout removes idle Workspaces of up-to-date Stacks
	// (0: off; a Stack's spec.workspaceIdleTimeoutSeconds overrides it).
	WorkspaceIdleTimeout time.Duration
	// InputsDigestKey keys the digests of the values Stacks read from
	// ConfigMaps and Secrets (status.lastUpdate.inputsDigest). When empty,
	// Setup reads it from the Secret InputsDigestKeySecret in
	// OperatorNamespace, creating it with a random key the first time, so
	// every replica and restart uses the same key.
	InputsDigestKey []byte
	// OperatorNamespace holds the operator's own objects (the digest key
	// Secret). Default "default".
	OperatorNamespace string
	// SSHKnownHosts holds known_hosts lines (--ssh-known-hosts) verifying
	// SSH host keys for every Stack and Workspace that names no knownHosts
	// of its own: in branch resolution and, passed to the agents of both
	// runtimes, in clones.
	SSHKnownHosts string
	// WorkspacePrepareTimeout, when positive, is every agent's
	// --prepare-timeout (the fetch and `pulumi install` of a revision);
	// zero leaves the agent's default (15 min) and its command line as it is.
	WorkspacePrepareTimeout time.Duration
	// GitListLimits bound each branch listing (--git-timeout,
	// --git-idle-timeout, --git-max-listing-bytes); zero fields take
	// gitremote's defaults.
	GitListLimits gitremote.Limits
	// GitListings and GitListingsPerNamespace bound the branch listings
	// under way, in all and for the Stacks of one namespace (--git-listings,
	// --git-listings-per-namespace); zero takes gitresolve's defaults.
	GitListings, GitListingsPerNamespace int
	// AgentGitLimits are every agent's --git-idle-timeout and
	// --git-max-fetch-bytes (their fetches' bounds besides
	// --prepare-timeout); zero fields leave the agents' defaults.
	AgentGitLimits gitremote.Limits
	// GitHubAPIHosts (--github-api-hosts) are the hosts besides GitHub.com's
	// API a Stack's gitAuth.githubApp.apiURL may name (GitHub Enterprise
	// Server); a Stack naming another is Stalled before any request is
	// made, and agents (given the list) refuse it too.
	GitHubAPIHosts []string
	// GitHubAppClient makes the operator's GitHub App token exchanges
	// (default: gitauth's, with a 30 s timeout); tests give one that trusts
	// a fake GitHub's certificate.
	GitHubAppClient *http.Client
}

// InputsDigestKeySecret is the Secret (key "key") holding the key of the
// inputs digests.
const InputsDigestKeySecret = "stackflow-inputs-digest-key"

// Scheme has the Kubernetes and Stackflow types.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, pulumiv1.AddToScheme, pulumiv1alpha1.AddToScheme, autov1alpha1.AddToScheme, stackflowv1alpha1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// Operator is what Setup assembled.
type Operator struct {
	// Agents is the agent connection pool; Close it when the manager stops.
	Agents *agentclient.Pool
	// Git is the shared branch resolver.
	Git *gitresolve.Shared
	// WebhookAddr is the push receiver's bound address, when it runs.
	WebhookAddr string
	// ArtifactAddr is the artifact server's bound address.
	ArtifactAddr string
	// ReadyChecks tell whether this replica, leader or not, can answer what
	// it serves (for AddProbeServer's /readyz).
	ReadyChecks map[string]healthz.Checker
}

// Close releases the agent connections.
func (o *Operator) Close() { o.Agents.Close() }

// Setup registers the reconcilers (and the artifact and webhook servers) on
// mgr, and returns readiness checks for what every replica serves. The
// reconcilers run on the leader only, the artifact server on every replica.
// Close the result when the manager stops.
func Setup(mgr ctrl.Manager, opts Options) (*Operator, error) {
	if err := requireKinds(mgr.GetRESTMapper()); err != nil {
		return nil, err
	}
	c := newUncachedSecrets(mgr.GetClient(), mgr.GetAPIReader())
	var rt workspace.Runtime
	switch opts.Runtime {
	case RuntimePod, "":
		psa, err := podsecurity.New(opts.PodSecurity)
		if err != nil {
			return nil, err
		}
		podOpts := opts.Pod
		podOpts.SSHKnownHosts = opts.SSHKnownHosts
		podOpts.AgentSettings = agentSettings(opts)
		rt = &workspace.PodRuntime{Client: c, Scheme: mgr.GetScheme(), Options: podOpts, Health: opts.PodHealth, Now: opts.PodClock,
			PodSecurity: psa, Reader: mgr.GetAPIReader()}
	case RuntimeLocal:
		if opts.AgentBinary == "" || opts.LocalRoot == "" {
			return nil, fmt.Errorf("the local runtime needs an agent binary and a root directory")
		}
		rt = &local.Runtime{Root: opts.LocalRoot, AgentBinary: opts.AgentBinary, PulumiRoot: opts.PulumiRoot,
			Env: opts.AgentEnv, Client: mgr.GetAPIReader(), RestartBackoff: opts.LocalRestartBackoff, SSHKnownHosts: opts.SSHKnownHosts,
			AgentSettings: agentSettings(opts)}
	default:
		return nil, fmt.Errorf("unknown workspace runtime %q: use pod or local", opts.Runtime)
	}
	pool, err := agentPool(opts)
	if err != nil {
		return nil, err
	}
	// The agent tokens the Workspace and Update controllers have read.
	tokens := &controller.AgentTokens{}
	if err := (&controller.WorkspaceReconciler{
		Client: c, Recorder: mgr.GetEventRecorderFor("workspace-controller"),
		Runtime: rt, Agents: pool, Workers: opts.WorkspaceWorkers, WatchPods: opts.Runtime != RuntimeLocal,
		SSHKnownHosts: opts.SSHKnownHosts, Tokens: tokens,
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up workspace controller: %w", err)
	}
	poll := opts.GitPollInterval
	if poll == 0 {
		poll = time.Minute
	}
	if opts.StackResyncOverride > 0 && opts.StackResyncOverride < poll {
		poll = opts.StackResyncOverride
	}
	git := &gitresolve.Shared{TTL: poll, Limits: opts.GitListLimits, MaxListings: opts.GitListings, MaxListingsPerNamespace: opts.GitListingsPerNamespace,
		Tokens: &gitauth.AppTokens{APIHosts: opts.GitHubAPIHosts, Client: opts.GitHubAppClient}}
	key := opts.InputsDigestKey
	if len(key) == 0 {
		var err error
		if key, err = inputsDigestKey(mgr, opts.OperatorNamespace); err != nil {
			return nil, err
		}
	}
	stacks := &controller.StackReconciler{
		Client: c, Recorder: mgr.GetEventRecorderFor("stack-controller"), Workers: opts.StackWorkers,
		ResyncOverride: opts.StackResyncOverride, Git: git, DigestKey: key, SSHKnownHosts: opts.SSHKnownHosts,
		SecretPollInterval: opts.SecretPollInterval, GitHubAPIHosts: opts.GitHubAPIHosts, UpdateHistory: updateHistory(opts.UpdateHistory),
		WorkspaceIdleTimeout: opts.WorkspaceIdleTimeout,
	}
	if err := stacks.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up stack controller: %w", err)
	}
	op := &Operator{Agents: pool, Git: git, ReadyChecks: map[string]healthz.Checker{}}
	if opts.WebhookAddr != "" {
		addr, err := setupWebhook(mgr, opts, stacks)
		if err != nil {
			return nil, err
		}
		op.WebhookAddr = addr
	}
	exits, _ := rt.(workspace.ExitReporter) // the pod runtime's; nil for the local one
	if err := (&controller.UpdateReconciler{
		Client: c, Recorder: mgr.GetEventRecorderFor("update-controller"),
		Agents: pool, Workers: opts.UpdateWorkers, Tokens: tokens, Exits: exits,
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up update controller: %w", err)
	}
	if err := setupPrograms(mgr, opts, op); err != nil {
		return nil, err
	}
	return op, nil
}

// agentSettings are the operator's settings every agent gets as flags.
// servedKinds are the kinds the operator watches, each of a CRD of this
// release (operator/config/crd, the chart's crds/).
var servedKinds = []schema.GroupVersionKind{
	pulumiv1.GroupVersion.WithKind("Stack"), pulumiv1.GroupVersion.WithKind("Program"),
	autov1alpha1.GroupVersion.WithKind("Workspace"), autov1alpha1.GroupVersion.WithKind("Update"),
	stackflowv1alpha1.GroupVersion.WithKind("PlanApproval"),
}

// requireKinds refuses to start when the API server serves one of
// servedKinds at no version the operator reads: the watch would never
// sync, and the operator would wait without saying why. Helm installs a
// chart's crds/ only on first install, so an upgrade that adds a kind
// (PlanApproval) needs its CRDs applied first (the chart's README).
func requireKinds(m meta.RESTMapper) error {
	var missing []string
	for _, gvk := range servedKinds {
		if _, err := m.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			if !meta.IsNoMatchError(err) {
				return fmt.Errorf("look up the API of %s: %w", gvk.Kind, err)
			}
			missing = append(missing, gvk.Kind+" ("+gvk.GroupVersion().String()+")")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the API server does not serve %s: apply this release's CRDs before starting the operator (kubectl apply --server-side -k operator/config/crd, or the chart's crds/ directory: Helm installs CRDs on the first install only)", strings.Join(missing, ", "))
	}
	return nil
}

func agentSettings(opts Options) pod.AgentSettings {
	return pod.AgentSettings{PrepareTimeout: opts.WorkspacePrepareTimeout, GitLimits: opts.AgentGitLimits, GitHubAPIHosts: opts.GitHubAPIHosts}
}

// With --workspace-auth=kube, agents ask the API server whether the operator
// may "use" their workspaces/rpc (a SubjectAccessReview).
// +kubebuilder:rbac:groups=auto.pulumi.com,resources=workspaces/rpc,verbs=use

// agentPool is the pool of agent connections, authenticated per workspace
// token or with the operator's own ServiceAccount token.
func agentPool(opts Options) (*agentclient.Pool, error) {
	if opts.Pod.AgentAuth != pod.AgentAuthKube {
		return agentclient.NewPool(), nil
	}
	if opts.Runtime == RuntimeLocal {
		return nil, fmt.Errorf("workspace agent auth %q needs the pod runtime (local agents use their own token)", pod.AgentAuthKube)
	}
	src := opts.AgentTokens
	if src == nil {
		if opts.AgentTokenFile == "" {
			return nil, fmt.Errorf("workspace agent auth %q needs the operator's token file (--workspace-token-file)", pod.AgentAuthKube)
		}
		src = &agentclient.FileToken{Path: opts.AgentTokenFile}
	}
	return agentclient.NewSourcePool(src), nil
}

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create

// inputsDigestKey reads (or, the first time, creates) the key of the inputs
// digests. Several replicas starting together may race to create it: the
// loser reads the winner's.
func inputsDigestKey(mgr ctrl.Manager, namespace string) ([]byte, error) {
	if namespace == "" {
		namespace = "default"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := types.NamespacedName{Namespace: namespace, Name: InputsDigestKeySecret}
	for attempt := 0; attempt < 3; attempt++ {
		var sec corev1.Secret
		err := mgr.GetAPIReader().Get(ctx, key, &sec)
		if err == nil {
			if k := sec.Data["key"]; len(k) >= 32 {
				return k, nil
			}
			return nil, fmt.Errorf("secret %s/%s has no 32-byte key %q: delete it to have a new one generated", namespace, InputsDigestKeySecret, "key")
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("read the inputs digest key (secret %s/%s): %w", namespace, InputsDigestKeySecret, err)
		}
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		sec = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: InputsDigestKeySecret}, Data: map[string][]byte{"key": b}}
		// The manager's client writes straight to the API server.
		err = mgr.GetClient().Create(ctx, &sec)
		if err == nil {
			return b, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create the inputs digest key (secret %s/%s): %w", namespace, InputsDigestKeySecret, err)
		}
	}
	return nil, fmt.Errorf("the inputs digest key secret %s/%s keeps changing", namespace, InputsDigestKeySecret)
}

// setupWebhook serves the push receiver: a verified push marks the repository
// for re-resolution and reconciles the Stacks tracking the pushed branch.
func setupWebhook(mgr ctrl.Manager, opts Options, stacks *controller.StackReconciler) (string, error) {
	if opts.WebhookSecret == "" {
		return "", fmt.Errorf("the push webhook needs a secret (--webhook-secret-file)")
	}
	l, err := net.Listen("tcp", opts.WebhookAddr)
	if err != nil {
		return "", fmt.Errorf("webhook server: %w", err)
	}
	log := ctrl.Log.WithName("webhook")
	receiver := &webhook.GitHub{
		Secret:     []byte(opts.WebhookSecret),
		Limiter:    rate.NewLimiter(rate.Limit(10), 50),
		Deliveries: &webhook.Deliveries{},
		Log:        log,
		OnPush: func(p webhook.Push) error {
			// Recorded on the Stacks (any replica may receive it), which the
			// leader then reconciles.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			token := time.Now().UTC().Format(time.RFC3339Nano)
			n, err := stacks.NotePush(ctx, p.RepoURLs, p.Branch, token)
			if err != nil {
				// Logged by the receiver under the request ID of its 503.
				return fmt.Errorf("record the push of %s branch %s: %w", p.RepoURLs[0], p.Branch, err)
			}
			log.Info("Push received", "repository", p.RepoURLs[0], "branch", p.Branch, "stacks", n)
			return nil
		},
	}
	mux := http.NewServeMux()
	mux.Handle("/webhooks/github", receiver)
	srv := webhook.NewServer(mux, webhook.DefaultTimeouts)
	// Every replica serves the webhook (not only the leader): a push is
	// recorded on the Stacks through the API server.
	if err := mgr.Add(everyReplica(func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		if err := srv.Serve(l); err != nil && err != http.ErrServerClosed {
			return err
		}
		return nil
	})); err != nil {
		l.Close()
		return "", err
	}
	return l.Addr().String(), nil
}

// setupPrograms registers the Program controller and its artifact server. The
// port is bound now (a busy address fails Setup, and ":0" gets its port before
// the base URL is derived). The controller publishes on the leader only; the
// server runs on every replica, so a Service in front of several replicas
// always reaches one that answers: an artifact missing from this replica's
// directory is rendered from the Program in the cache (tarballs are
// deterministic) and served when its digest is the requested one.
func setupPrograms(mgr ctrl.Manager, opts Options, op *Operator) error {
	dir := opts.ArtifactDir
	if dir == "" {
		d, err := os.MkdirTemp("", "stackflow-artifacts-")
		if err != nil {
			return fmt.Errorf("artifact directory: %w", err)
		}
		dir = d
	}
	// Registered now so that it starts with the cache on every replica (the
	// controller's watch, which would otherwise create it, runs on the leader
	// only), and readiness can wait for it.
	programs, err := mgr.GetCache().GetInformer(context.Background(), &pulumiv1.Program{})
	if err != nil {
		return fmt.Errorf("program informer: %w", err)
	}
	addr := opts.ArtifactAddr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("artifact server: %w", err)
	}
	base := opts.ArtifactBaseURL
	if base == "" {
		_, port, _ := net.SplitHostPort(l.Addr().String())
		base = "http://127.0.0.1:" + port
	}
	store := &artifact.Store{Dir: dir, BaseURL: base, Render: controller.ProgramArtifactRenderer(mgr.GetClient()),
		Log: ctrl.Log.WithName("artifacts")}
	// A manager.Server runs with the probe and metrics servers: on every
	// replica (not only the leader), and before the caches have synced, so
	// that a request it cannot answer yet gets a 503 rather than no answer.
	shutdown := artifact.ShutdownTimeout
	if err := mgr.Add(&manager.Server{Name: "artifacts", Server: store.NewServer(), Listener: store.Listener(l),
		ShutdownTimeout: &shutdown}); err != nil {
		l.Close()
		return fmt.Errorf("add artifact server: %w", err)
	}
	op.ArtifactAddr = l.Addr().String()
	op.ReadyChecks["artifact-server"] = func(*http.Request) error { return store.Serving() }
	op.ReadyChecks["program-cache"] = func(*http.Request) error {
		if !programs.HasSynced() {
			return errors.New("the Program cache has not synced")
		}
		return nil
	}
	if err := (&controller.ProgramReconciler{
		Client: mgr.GetClient(), Store: store, Recorder: mgr.GetEventRecorderFor("program-controller"),
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up program controller: %w", err)
	}
	return nil
}

// everyReplica is a runnable that runs on every replica, leader or not.
type everyReplica func(ctx context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }
func (everyReplica) NeedLeaderElection() bool          { return false }

// eventCacheSize bounds each cache of the event correlator (the spam filter,
// the aggregator and the log of events sent), which client-go sizes for a
// kubelet: 4,096 keys each. The operator's events are about Stacks,
// Workspaces and Updates, already one per change of condition, and every
// Update is a new object, so those caches mostly hold events that never
// recur, and with 4,096 keys they kept growing over the first ~2,000
// Updates (~2.5 KiB of heap per Update; the memory benchmark).
const eventCacheSize = 512

// EventBroadcaster is the broadcaster the manager records events with
// (ctrl.Options.EventBroadcaster), with bounded correlator caches. It lives
// as long as the process and is never shut down: the manager hands a given
// broadcaster to two event recorder providers (its own and its cluster's),
// which never stop it, and the cluster's starts it only while the manager
// stops, so a broadcaster shut down when the manager's Start returns (or
// when its context ends) makes that start log "Unable start event watcher
// (will not retry!)". One broadcaster per manager, and one manager per
// process (tests start several: each keeps a few idle goroutines).
func EventBroadcaster() record.EventBroadcaster {
	return record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{LRUCacheSize: eventCacheSize}))
}

// CacheOptions limits the manager's caches (and so its watches, RBAC needs and
// reconciles) to namespaces; none means cluster-wide. Pods are cached only
// when they are workspace pods (labelled as managed by Stackflow), so the
// operator does not hold every pod of the cluster in memory. Secrets are
// never cached: Setup's clients read them from the API server
// (uncachedSecrets), so no Secret informer exists.
func CacheOptions(namespaces []string) cache.Options {
	opts := cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{pod.LabelManagedBy: pod.LabelManagedByValue})},
	}}
	if len(namespaces) == 0 {
		return opts
	}
	m := map[string]cache.Config{}
	for _, ns := range namespaces {
		m[ns] = cache.Config{}
	}
	opts.DefaultNamespaces = m
	return opts
}

// CacheOptionsFor is CacheOptions for opts' namespaces, with its shard's
// label selector on the kinds a shard owns (Stack, Program, Workspace,
// Update). PlanApprovals are not selected (people and Argo CD create them
// unlabelled; each names its Stack), nor the ConfigMaps Stacks read.
func CacheOptionsFor(opts Options) cache.Options {
	c := CacheOptions(opts.WatchNamespaces)
	if opts.WatchLabelSelector == nil || opts.WatchLabelSelector.Empty() {
		return c
	}
	for _, obj := range []client.Object{&pulumiv1.Stack{}, &pulumiv1.Program{}, &autov1alpha1.Workspace{}, &autov1alpha1.Update{}} {
		c.ByObject[obj] = cache.ByObject{Label: opts.WatchLabelSelector}
	}
	return c
}

// updateHistory is the Stack controller's history limit for opts'
// UpdateHistory: the default for 0, none (0) for a negative one.
func updateHistory(n int) int {
	switch {
	case n == 0:
		return controller.DefaultUpdateHistory
	case n < 0:
		return 0
	}
	return n
}
