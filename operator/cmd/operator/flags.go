package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/controller"
	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
	"github.com/stackflow-io/stackflow/operator/internal/gitremote"
	"github.com/stackflow-io/stackflow/operator/internal/gitresolve"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/podsecurity"
)

// config is the command line: the operator's options and the manager's
// addresses, before resolve reads files and checks flags against each other.
type config struct {
	opts        operator.Options
	metrics     operator.MetricsOptions
	probeAddr   string
	pprofAddr   string
	leaderElect operator.LeaderElection
	zap         zap.Options

	agentEnv          string
	webhookSecretFile string
	watchNamespaces   string
	// watchLabelSelector is --watch-label-selector, parsed by resolve.
	watchLabelSelector string
	workspaceAuth      string
	podSecurity        string
	sshKnownHostsFile  string
	githubAPIHosts     string
	gitListingBytes    gitremote.ByteSize
	gitFetchBytes      gitremote.ByteSize
}

// parseFlags parses args (without the program name) into a config.
func parseFlags(fs *flag.FlagSet, args []string) (*config, error) {
	c := &config{zap: zap.Options{Development: false},
		gitListingBytes: gitremote.DefaultMaxListingBytes, gitFetchBytes: gitremote.DefaultMaxFetchBytes}
	opts := &c.opts
	fs.StringVar(&opts.Runtime, "workspace-runtime", operator.RuntimePod, `how workspaces run: "pod" (StatefulSets; for clusters) or "local" (agent child processes; for development)`)
	fs.StringVar(&opts.Pod.AgentImage, "agent-image", "ghcr.io/stackflow-io/stackflow-operator:latest", "image holding the agent at /agent (pod runtime)")
	fs.StringVar(&opts.Pod.DefaultPulumiImage, "pulumi-image", "pulumi/pulumi:3.274.1-nonroot", "workspace image when spec.image is empty (pod runtime)")
	fs.BoolVar(&opts.Pod.AddressByPodIP, "workspace-address-pod-ip", false, "reach workspace agents at their pod IPs instead of their headless Services' DNS names, for an operator outside the cluster DNS (pod runtime)")
	fs.StringVar(&c.workspaceAuth, "workspace-auth", string(pod.AgentAuthToken), `how the operator authenticates to workspace agents (pod runtime): "token" (a random token per Workspace in the Secret <workspace>-agent-token-<uid>, new when the Workspace is recreated) or "kube" (the operator's ServiceAccount token from --workspace-token-file, checked by the agent with a TokenReview and a SubjectAccessReview for "use" on workspaces/rpc; the workspace ServiceAccount needs the ClusterRole system:auth-delegator)`)
	fs.StringVar(&opts.AgentTokenFile, "workspace-token-file", "/var/run/secrets/stackflow/agent/token", "with --workspace-auth=kube: the operator's ServiceAccount token for agents, a projected token volume with the --workspace-token-audience audience (re-read every minute, as the kubelet rotates it)")
	fs.StringVar(&opts.Pod.KubeAudience, "workspace-token-audience", pod.DefaultKubeAudience, "with --workspace-auth=kube: the token audience agents accept")
	fs.StringVar(&opts.Pod.DefaultServiceAccount, "default-workspace-service-account", "", `lockdown: the workspace pods' ServiceAccount when a Stack names none (spec.serviceAccountName); default "default" of the Stack's namespace`)
	fs.StringVar(&c.podSecurity, "pod-security-enforcement", "off", `lockdown: refuse workspace pods that the Pod Security level of their namespace forbids, with the reason on the Stack (Stalled, PodSecurityForbidden) instead of pods the API server will not create: "off", "namespace" (its pod-security.kubernetes.io/enforce label; unlabelled = privileged), or a floor "baseline" / "restricted" (the stricter of it and the label)`)
	fs.StringVar(&opts.LocalRoot, "local-root", "", "directory holding the local runtime's workspaces")
	fs.StringVar(&opts.AgentBinary, "agent-binary", "", "agent executable for the local runtime")
	fs.StringVar(&opts.PulumiRoot, "pulumi-root", "", "directory holding bin/pulumi for local agents (default: pulumi from PATH)")
	fs.DurationVar(&opts.LocalRestartBackoff, "local-restart-backoff", 30*time.Second, "how long a failed local agent stays down before it is restarted")
	fs.StringVar(&c.agentEnv, "agent-env", "", "comma-separated KEY=VALUE environment for local agents")
	fs.IntVar(&opts.WorkspaceWorkers, "workspace-workers", 4, "concurrent Workspace reconciles")
	fs.DurationVar(&opts.StackResyncOverride, "stack-resync-override", 0, "replace every Stack's resync interval (for tests and local demos; the API's minimum is 60s)")
	fs.IntVar(&opts.StackWorkers, "stack-workers", 4, "concurrent Stack reconciles")
	fs.IntVar(&opts.UpdateWorkers, "update-workers", 4, "concurrent Update reconciles (operations in flight are not limited by it)")
	fs.StringVar(&opts.ArtifactDir, "artifact-dir", "", "directory holding Program artifacts (default: a new temporary directory; need not persist)")
	fs.StringVar(&opts.ArtifactAddr, "artifact-addr", ":9090", "listen address of the artifact server workspaces download Programs from")
	fs.StringVar(&opts.ArtifactBaseURL, "artifact-base-url", "", "URL workspaces reach the artifact server at, e.g. http://stackflow-operator.stackflow-system.svc:9090 (default: http://127.0.0.1:<port of --artifact-addr>)")
	fs.DurationVar(&opts.GitPollInterval, "git-poll-interval", time.Minute, "how long a branch listing serves every Stack of a repository (relax to 5-10m with the push webhook)")
	fs.DurationVar(&opts.GitListLimits.Timeout, "git-timeout", gitremote.DefaultListTimeout, "the longest one branch listing may take, from the connection (and a GitHub App's token exchange) to the last reference: a git server still answering then fails it, and the Stacks of that repository show the server and what ran out (Reconciling, SourceUnreachable) and retry with backoff. Listings run off the reconcile workers, so a slow server never delays other Stacks")
	fs.DurationVar(&opts.GitListLimits.IdleTimeout, "git-idle-timeout", gitremote.DefaultIdleTimeout, "a git server that sends nothing for this long fails the listing (and, passed to agents, the fetch) it serves")
	fs.Var(&c.gitListingBytes, "git-max-listing-bytes", "the most a branch listing reads from a git server (its reference advertisement), e.g. 64Mi; a server sending more fails it")
	fs.Var(&c.gitFetchBytes, "git-max-fetch-bytes", "the most an agent's fetch of a revision reads from a git server, e.g. 4Gi, passed to agents (their fetches are bounded in time by --workspace-prepare-timeout)")
	fs.IntVar(&opts.GitListings, "git-listings", gitresolve.DefaultMaxListings, "the most branch listings under way at once")
	fs.IntVar(&opts.GitListingsPerNamespace, "git-listings-per-namespace", gitresolve.DefaultMaxListingsPerNamespace, "the most branch listings under way at once for the Stacks of one namespace: a namespace whose repositories never answer holds at most this many of --git-listings")
	fs.StringVar(&opts.WebhookAddr, "webhook-bind-address", "", "serve the GitHub push webhook at /webhooks/github on this address; needs --webhook-secret-file (the webhook is off without it)")
	fs.StringVar(&c.webhookSecretFile, "webhook-secret-file", "", "file holding the push webhook's secret; without it the webhook is off (a file that cannot be read is an error)")
	fs.StringVar(&opts.OperatorNamespace, "operator-namespace", envOr("POD_NAMESPACE", "default"), "namespace of the operator's own objects: the Secret "+operator.InputsDigestKeySecret+" keying the digests of Stack inputs (created when missing)")
	fs.DurationVar(&opts.SecretPollInterval, "secret-poll-interval", controller.DefaultSecretPoll, "how often an up-to-date Stack re-reads the Secrets it refers to: Secrets are read by name, never watched (least privilege), so a rotated Secret is deployed within this interval")
	fs.DurationVar(&opts.WorkspaceIdleTimeout, "workspace-idle-timeout", 0, "remove the Workspace (and its pod) of an up-to-date Stack once nothing has run in it for this long, e.g. 30m; its next operation creates it again (a fresh checkout and install). A Stack's spec.workspaceIdleTimeoutSeconds overrides it. 0: keep Workspaces (PKO's behaviour)")
	fs.IntVar(&opts.UpdateHistory, "update-history", controller.DefaultUpdateHistory, "how many finished Updates each Stack keeps (the newest; those its status names are always kept), besides their age bound spec.ttlAfterCompleted (default 24h): a Stack deploying every few minutes keeps a short list in kubectl and Argo CD's resource tree; -1 keeps all")
	fs.DurationVar(&opts.WorkspacePrepareTimeout, "workspace-prepare-timeout", 0, "the longest a workspace agent may take to prepare a revision — the git fetch or artifact download and pulumi install, at start and for each in-place checkout — passed to agents as --prepare-timeout; one still running then fails (SourceUnavailable while fetching, InstallationFailed while installing, with the install's last output line, redacted), stalling the Workspace, which asks again after a minute (0: the agent's default, 15m)")
	fs.StringVar(&c.sshKnownHostsFile, "ssh-known-hosts", "", "known_hosts file (OpenSSH format, e.g. from ssh-keyscan) verifying the host keys of SSH git servers for every Stack whose spec.gitAuth.sshAuth.knownHosts is unset, in branch resolution and in workspace clones (both runtimes); without it and without knownHosts, SSH sources fail: host keys are never accepted unverified")
	fs.StringVar(&c.githubAPIHosts, "github-api-hosts", "", "comma-separated GitHub Enterprise Server hosts (host or host:port; port 443 when none) that a Stack's spec.gitAuth.githubApp.apiURL may name besides api.github.com, e.g. ghe.example.com; passed to agents. A Stack naming another host is Stalled (SpecInvalid) before any request is sent, and an agent refuses it. An apiURL must in any case be https, with an empty path or one ending in /api/v3, and no user info, query or fragment; an unset apiURL is GitHub.com's API")
	fs.StringVar(&c.watchLabelSelector, "watch-label-selector", "", "run as one shard: reconcile only the Stacks, Programs, Workspaces and Updates this label selector selects, e.g. "+pulumiv1.ShardLabel+"=shard1 (one Deployment per shard, each with its own --leader-elect-id), and \"!"+pulumiv1.ShardLabel+"\" for the default shard of unlabelled objects. The operator labels a Stack's Workspace and Updates as the Stack; relabelling a Stack hands it over once its running update ends. Default: everything")
	fs.StringVar(&c.watchNamespaces, "watch-namespaces", "", "comma-separated namespaces to watch (default: all); limits caches, RBAC needs and reconciles")
	fs.StringVar(&c.metrics.Addr, "metrics-bind-address", ":8080", "address serving Prometheus metrics at /metrics, on every replica (0 disables)")
	fs.StringVar(&c.metrics.Auth, "metrics-auth", operator.MetricsAuthKube, `who may read /metrics: "kube" (HTTPS; a bearer token passing a TokenReview whose user may get the non-resource URL /metrics, e.g. bound to the ClusterRole stackflow-metrics-reader) or "none" (plain HTTP, anyone)`)
	fs.StringVar(&c.metrics.CertDir, "metrics-cert-dir", "", "directory holding tls.crt and tls.key for the metrics server (reloaded when they change); default with --metrics-auth=kube: a self-signed certificate made at start")
	fs.StringVar(&c.probeAddr, "health-probe-bind-address", ":8081", "health probe address: /healthz (the process answers) and /readyz (this replica, leader or not, serves artifacts: artifact server up, Program cache synced); 0 disables")
	fs.StringVar(&c.pprofAddr, "pprof-bind-address", "0", "address serving Go's profiles at /debug/pprof/ (heap, goroutine, profile…) for diagnosing memory or CPU, unauthenticated: bind it to loopback (e.g. 127.0.0.1:6060) and reach it with kubectl port-forward; 0 (the default) disables it")
	fs.BoolVar(&c.leaderElect.Enabled, "leader-elect", false, "elect a leader through the Lease "+operator.LeaderElectionID+", for more than one replica (only the leader reconciles; every replica serves artifacts and probes)")
	fs.StringVar(&c.leaderElect.Namespace, "leader-elect-namespace", "", "namespace of the leader election Lease (default in a cluster: the pod's namespace; required outside one)")
	fs.StringVar(&c.leaderElect.Identity, "leader-elect-identity", "", "this replica's name in the Lease's holderIdentity (default: <hostname>_<random UUID>; e.g. the pod name from the downward API)")
	fs.StringVar(&c.leaderElect.ID, "leader-elect-id", operator.LeaderElectionID, "name of the leader election Lease: one per shard (see --watch-label-selector)")
	fs.DurationVar(&c.leaderElect.LeaseDuration, "leader-elect-lease-duration", operator.DefaultLeaseDuration, "how long followers wait after the leader's last renewal before taking over (a crashed leader; a clean shutdown hands over at once)")
	fs.DurationVar(&c.leaderElect.RenewDeadline, "leader-elect-renew-deadline", operator.DefaultRenewDeadline, "how long the leader retries renewing the Lease before it stops leading and exits (less than the lease duration)")
	fs.DurationVar(&c.leaderElect.RetryPeriod, "leader-elect-retry-period", operator.DefaultRetryPeriod, "interval between attempts to acquire or renew the Lease")
	c.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return c, nil
}

// resolve completes the options from the flags: it validates leader election,
// splits the lists, and reads the webhook secret. An optional feature left off
// is logged in one line; a flag that names something missing is an error.
func (c *config) resolve(log logr.Logger) error {
	if c.opts.WorkspacePrepareTimeout < 0 {
		return fmt.Errorf("--workspace-prepare-timeout=%s: give a positive duration, e.g. 30m, or 0 for the agent's default", c.opts.WorkspacePrepareTimeout)
	}
	l := &c.opts.GitListLimits
	if l.Timeout <= 0 || l.IdleTimeout <= 0 || c.opts.GitListings <= 0 || c.opts.GitListingsPerNamespace <= 0 {
		return fmt.Errorf("--git-timeout (%s), --git-idle-timeout (%s), --git-listings (%d) and --git-listings-per-namespace (%d) must be positive",
			l.Timeout, l.IdleTimeout, c.opts.GitListings, c.opts.GitListingsPerNamespace)
	}
	l.MaxBytes = int64(c.gitListingBytes)
	l.TimeoutFlag, l.IdleFlag, l.BytesFlag = "--git-timeout", gitremote.IdleTimeoutFlag, "--git-max-listing-bytes"
	c.opts.AgentGitLimits = gitremote.Limits{IdleTimeout: l.IdleTimeout, MaxBytes: int64(c.gitFetchBytes)}
	if c.opts.SecretPollInterval <= 0 {
		return fmt.Errorf("--secret-poll-interval=%s: give a positive duration, e.g. 1m", c.opts.SecretPollInterval)
	}
	if c.leaderElect.Enabled {
		if err := c.leaderElect.Validate(); err != nil { // before looking for a cluster
			return fmt.Errorf("invalid leader election flags: %w", err)
		}
	}
	switch auth := pod.AgentAuth(c.workspaceAuth); auth {
	case pod.AgentAuthToken, pod.AgentAuthKube:
		c.opts.Pod.AgentAuth = auth
	default:
		return fmt.Errorf("--workspace-auth=%s: use token or kube", c.workspaceAuth)
	}
	if c.opts.Pod.AgentAuth == pod.AgentAuthKube && c.opts.Runtime == operator.RuntimeLocal {
		return errors.New("--workspace-auth=kube needs --workspace-runtime=pod (local agents always use a token)")
	}
	mode, err := podsecurity.ParseMode(c.podSecurity)
	if err != nil {
		return fmt.Errorf("--pod-security-enforcement: %w", err)
	}
	c.opts.PodSecurity = mode
	c.opts.AgentEnv = map[string]string{}
	for _, kv := range strings.Split(c.agentEnv, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			c.opts.AgentEnv[k] = v
		}
	}
	c.opts.WatchLabelSelector = nil
	if c.watchLabelSelector != "" {
		sel, err := labels.Parse(c.watchLabelSelector)
		if err != nil {
			return fmt.Errorf("--watch-label-selector=%q: %v (e.g. %s=shard1, or !%s)", c.watchLabelSelector, err, pulumiv1.ShardLabel, pulumiv1.ShardLabel)
		}
		c.opts.WatchLabelSelector = sel
	}
	c.opts.WatchNamespaces = nil
	for _, ns := range strings.Split(c.watchNamespaces, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			c.opts.WatchNamespaces = append(c.opts.WatchNamespaces, ns)
		}
	}
	c.opts.GitHubAPIHosts = nil
	for _, h := range strings.Split(c.githubAPIHosts, ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		if strings.ContainsAny(h, "/?#@ ") {
			return fmt.Errorf("--github-api-hosts: %q is not a host or host:port (e.g. ghe.example.com)", h)
		}
		c.opts.GitHubAPIHosts = append(c.opts.GitHubAPIHosts, h)
	}
	if c.sshKnownHostsFile != "" {
		b, err := os.ReadFile(c.sshKnownHostsFile)
		if err != nil {
			return fmt.Errorf("read the SSH known_hosts file (--ssh-known-hosts): %w", err)
		}
		if _, err := gitauth.HostKeyCallback(string(b)); err != nil {
			return fmt.Errorf("--ssh-known-hosts=%s: %w", c.sshKnownHostsFile, err)
		}
		c.opts.SSHKnownHosts = string(b)
	} else {
		log.Info("No operator-wide SSH known_hosts (--ssh-known-hosts): SSH git sources need spec.gitAuth.sshAuth.knownHosts")
	}
	return c.resolveWebhook(log)
}

// resolveWebhook turns the push webhook on only when its secret is given: an
// install without the optional Secret starts, with the webhook off.
func (c *config) resolveWebhook(log logr.Logger) error {
	if c.webhookSecretFile == "" {
		if c.opts.WebhookAddr != "" {
			log.Info("Push webhook disabled: no --webhook-secret-file (--webhook-bind-address ignored)", "webhookBindAddress", c.opts.WebhookAddr)
		} else {
			log.Info("Push webhook disabled: no --webhook-secret-file")
		}
		c.opts.WebhookAddr, c.opts.WebhookSecret = "", ""
		return nil
	}
	if c.opts.WebhookAddr == "" {
		return errors.New("--webhook-secret-file needs --webhook-bind-address (the address serving the push webhook)")
	}
	b, err := os.ReadFile(c.webhookSecretFile)
	if err != nil {
		return fmt.Errorf("read the push webhook secret (--webhook-secret-file): %w", err)
	}
	c.opts.WebhookSecret = strings.TrimSpace(string(b))
	if c.opts.WebhookSecret == "" {
		return fmt.Errorf("the push webhook secret file %s is empty", c.webhookSecretFile)
	}
	log.Info("Push webhook enabled", "webhookBindAddress", c.opts.WebhookAddr)
	return nil
}

// envOr is the variable's value, or def when it is unset.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
