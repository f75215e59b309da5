package operator

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
)

// LeaderElectionID is the name of the Lease the replicas compete for.
const LeaderElectionID = "stackflow-operator.pulumi.com"

// Leader election defaults (controller-runtime's).
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// inClusterNamespaceFile holds the pod's namespace in a cluster.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// LeaderElection configures how replicas elect the one that reconciles. Only
// the leader runs the controllers; every replica serves the artifact
// endpoint, metrics and probes.
type LeaderElection struct {
	// Enabled turns leader election on (off: this process always leads).
	Enabled bool
	// Namespace holds the Lease (default in a cluster: the pod's namespace;
	// required outside one).
	Namespace string
	// Identity names this replica in the Lease's holderIdentity (default
	// <hostname>_<random UUID>; set it to the pod name to see which pod leads).
	Identity string
	// LeaseDuration is how long followers wait after the last renewal before
	// taking over from a leader that vanished (a crash; a clean shutdown
	// releases the Lease at once).
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps retrying a renewal before it
	// gives up leading (and the process exits).
	RenewDeadline time.Duration
	// RetryPeriod is the interval between attempts to acquire or renew.
	RetryPeriod time.Duration
	// ID names the Lease (default LeaderElectionID). Each shard
	// (--watch-label-selector) elects its own leader, so names its own.
	ID string
}

// LeaseName is the Lease the replicas elect their leader through.
func (le LeaderElection) LeaseName() string {
	if le.ID != "" {
		return le.ID
	}
	return LeaderElectionID
}

// Validate checks the durations as client-go's leader elector requires them:
// lease duration > renew deadline > 1.2 × retry period > 0.
func (le LeaderElection) Validate() error {
	switch {
	case le.LeaseDuration <= 0 || le.RenewDeadline <= 0 || le.RetryPeriod <= 0:
		return fmt.Errorf("leader election durations must be positive: lease duration %s, renew deadline %s, retry period %s",
			le.LeaseDuration, le.RenewDeadline, le.RetryPeriod)
	case le.LeaseDuration <= le.RenewDeadline:
		return fmt.Errorf("--leader-elect-lease-duration (%s) must be longer than --leader-elect-renew-deadline (%s)",
			le.LeaseDuration, le.RenewDeadline)
	case float64(le.RenewDeadline) <= 1.2*float64(le.RetryPeriod):
		return fmt.Errorf("--leader-elect-renew-deadline (%s) must be longer than 1.2 × --leader-elect-retry-period (%s)",
			le.RenewDeadline, le.RetryPeriod)
	}
	return nil
}

// leaseNamespace is the namespace given, else the pod's (read with readFile).
func leaseNamespace(given string, readFile func(string) ([]byte, error)) (string, error) {
	if given != "" {
		return given, nil
	}
	b, err := readFile(inClusterNamespaceFile)
	if errors.Is(err, fs.ErrNotExist) {
		return "", errors.New("leader election needs a namespace for its Lease: set --leader-elect-namespace (in a cluster it defaults to the pod's namespace)")
	}
	if err != nil {
		return "", fmt.Errorf("read the pod's namespace for the leader election Lease: %w", err)
	}
	ns := strings.TrimSpace(string(b))
	if ns == "" {
		return "", fmt.Errorf("%s is empty: set --leader-elect-namespace", inClusterNamespaceFile)
	}
	return ns, nil
}

// leaseIdentity is the identity given, else <hostname>_<random UUID>, as
// controller-runtime names replicas.
func leaseIdentity(given string, hostname func() (string, error)) (string, error) {
	if given != "" {
		return given, nil
	}
	h, err := hostname()
	if err != nil {
		return "", fmt.Errorf("leader election identity: %w", err)
	}
	return h + "_" + string(uuid.NewUUID()), nil
}

// Apply sets the manager's leader election options: the Lease
// LeaderElectionID in the namespace, held under this replica's identity, with
// the configured durations, released on a clean shutdown so that another
// replica takes over at once. It returns the identity.
func (le LeaderElection) Apply(cfg *rest.Config, o *ctrl.Options) (string, error) {
	if !le.Enabled {
		return "", nil
	}
	if err := le.Validate(); err != nil {
		return "", err
	}
	ns, err := leaseNamespace(le.Namespace, os.ReadFile)
	if err != nil {
		return "", err
	}
	id, err := leaseIdentity(le.Identity, os.Hostname)
	if err != nil {
		return "", err
	}
	// As controller-runtime does: a request timeout below the renew deadline,
	// so that one hung request cannot cost the leadership.
	lcfg := rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election")
	lcfg.Timeout = max(le.RenewDeadline/2, time.Second)
	leases, err := coordinationv1client.NewForConfig(lcfg)
	if err != nil {
		return "", fmt.Errorf("leader election client: %w", err)
	}
	o.LeaderElection = true
	o.LeaderElectionID = le.LeaseName()
	o.LeaderElectionNamespace = ns
	o.LeaderElectionResourceLockInterface = &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: le.LeaseName()},
		Client:     leases,
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = &le.LeaseDuration, &le.RenewDeadline, &le.RetryPeriod
	o.LeaderElectionReleaseOnCancel = true
	return id, nil
}
