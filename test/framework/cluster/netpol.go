package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// NetworkPolicies are enforced by kube-network-policies (a SIG Network
// controller built by hack/substrate.sh netpol), which runs beside the bridge
// CNI: it gives a verdict, in user space, on the first packet of each new
// connection that netfilter queues to it (NFQUEUE), from the policies it
// watches. Its own dataplane is an nftables table whose rules use nftables'
// queue expression; a kernel built without it (CONFIG_NFT_QUEUE, as this
// machine's: "No such file or directory" when the rule is added, so the whole
// table is refused) gets equivalent rules here instead, through iptables'
// NFQUEUE target (xt_NFQUEUE), which such kernels have. Verdicts are the
// controller's either way.
const (
	netpolName  = "kube-network-policies"
	netpolQueue = 100                     // its --nfqueue-id (the default)
	netpolTable = "kube-network-policies" // its nftables table (inet family)
	netpolChain = "STACKFLOW-NETPOL"      // ours, in iptables' mangle table
	netpolSADir = "/run/secrets/kubernetes.io/serviceaccount"
	netpolNS    = "kube-system"
	// The token is not renewed: a `make cluster` kept for longer loses its
	// watches.
	netpolTokenTT = 24 * time.Hour
)

// NetworkPolicyDataplane says how packets reach kube-network-policies:
// "nftables" (its own table) or "iptables NFQUEUE" (the rules above).
func (c *Cluster) NetworkPolicyDataplane() string { return c.netpolDataplane }

// startNetworkPolicies runs kube-network-policies as root in the host's
// network namespace, as its ServiceAccount, and waits until it listens on its
// queue and packets are sent there.
func (c *Cluster) startNetworkPolicies(ctx context.Context) error {
	saDir := c.path(netpolName, "serviceaccount")
	if err := c.netpolCredentials(ctx, saDir); err != nil {
		return err
	}
	bin := filepath.Join(c.opts.NetpolDir, netpolName)
	// It reads only the in-cluster configuration (no kubeconfig flag): the
	// token and CA at their pod paths, mounted in a mount namespace of its
	// own (a tmpfs over /run there, so nothing is written to the host's),
	// and the API server's address from the environment.
	script := `mount -t tmpfs -o mode=0755 tmpfs /run && mkdir -p ` + netpolSADir +
		` && mount --bind "$0" ` + netpolSADir + ` && exec "$@"`
	args := []string{"--mount", "--propagation", "private", "--", "sh", "-c", script, saDir, bin,
		"--hostname-override=" + NodeName,
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(c.ports["netpol-metrics"]),
		"--nfqueue-id=" + strconv.Itoa(netpolQueue),
		// The conntrack race it works around is fixed in kernels 6.12+, and
		// there is no cluster DNS.
		"--netfilter-bug-1766-fix=false",
		// containerd 1.6 has no NRI; pod IPs come from the API server.
		"--disable-nri",
		// Each verdict in its log.
		"-v=2",
	}
	p, err := startProcess(c.logDir(), netpolName, "unshare", args, []string{
		"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=" + strconv.Itoa(c.apiPort()),
	})
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	metrics := "http://127.0.0.1:" + strconv.Itoa(c.ports["netpol-metrics"]) + "/metrics"
	if err := wait(ctx, time.Minute, netpolName, p, func() (bool, error) {
		resp, err := http.Get(metrics)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return queueBound(netpolQueue)
	}); err != nil {
		return err
	}
	// Its first sync of the table ran before it bound the queue.
	if exec.CommandContext(ctx, "nft", "list", "table", "inet", netpolTable).Run() == nil {
		c.netpolDataplane = "nftables"
		return nil
	}
	if err := addNetpolQueueRules(c.opts.PodSubnet); err != nil {
		return err
	}
	c.netpolDataplane = "iptables NFQUEUE"
	c.logf("Cluster: kube-network-policies has no nftables table (the kernel refuses its queue expression, see %s): its queue gets packets from iptables' NFQUEUE target", p.log.Name())
	return nil
}

// netpolCredentials gives kube-network-policies a ServiceAccount bound to
// the ClusterRole of its install.yaml and writes, into dir, what a pod of it
// would have mounted: a token (TokenRequest), the CA and the namespace.
func (c *Cluster) netpolCredentials(ctx context.Context, dir string) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: netpolName, Namespace: netpolNS}}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: netpolName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"list", "watch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: netpolName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: netpolName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: netpolName, Namespace: netpolNS}},
	}
	if _, err := c.Client.CoreV1().ServiceAccounts(netpolNS).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	tr, err := c.Client.CoreV1().ServiceAccounts(netpolNS).CreateToken(ctx, netpolName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(netpolTokenTT / time.Second))},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for %s/%s: %w", netpolNS, netpolName, err)
	}
	ca, err := os.ReadFile(c.pki.CAFile())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, b := range map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": ca, "namespace": []byte(netpolNS)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// queueBound reports whether a process listens on NFQUEUE queue
// (/proc/net/netfilter/nfnetlink_queue: queue number, peer port id, …).
func queueBound(queue int) (bool, error) {
	b, err := os.ReadFile("/proc/net/netfilter/nfnetlink_queue")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == strconv.Itoa(queue) {
			return true, nil
		}
	}
	return false, fmt.Errorf("nothing listens on NFQUEUE %d yet", queue)
}

// netpolQueueRules are kube-network-policies' postrouting chain in iptables
// terms: root's own traffic on the node passes (kubelet probes, the
// in-process operator; its "meta skuid 0 accept"), established and related
// packets pass, the first packet of every other connection from or to a pod
// is queued (it queues only pods some policy selects; a pod no policy
// selects gets an accept verdict, so this queues more, with the same
// verdicts). Fail-closed, like its default (--fail-open=false): no
// --queue-bypass. Mangle's POSTROUTING runs before NAT's, as its chain does.
func netpolQueueRules(podSubnet string) [][]string {
	q := []string{"-j", "NFQUEUE", "--queue-num", strconv.Itoa(netpolQueue)}
	return [][]string{
		{"-m", "owner", "--uid-owner", "0", "-j", "RETURN"},
		{"-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"},
		append([]string{"-s", podSubnet}, q...),
		append([]string{"-d", podSubnet}, q...),
	}
}

var netpolJump = []string{"POSTROUTING", "-m", "comment", "--comment", "stackflow test cluster: kube-network-policies", "-j", netpolChain}

// addNetpolQueueRules first removes what a killed test binary may have left
// (the machine lock lets one cluster run at a time, so the rules are ours).
func addNetpolQueueRules(podSubnet string) error {
	if err := cleanupNetworkPolicies(); err != nil {
		return err
	}
	if err := iptables("-t", "mangle", "-N", netpolChain); err != nil {
		return err
	}
	for _, r := range netpolQueueRules(podSubnet) {
		if err := iptables(append([]string{"-t", "mangle", "-A", netpolChain}, r...)...); err != nil {
			return err
		}
	}
	return iptables(append([]string{"-t", "mangle", "-A"}, netpolJump...)...)
}

// cleanupNetworkPolicies removes our queue rules and kube-network-policies'
// nftables table (it removes the table itself only when stopped by SIGINT,
// and never made one when the kernel refused it), after it has stopped.
func cleanupNetworkPolicies() error {
	var errs []string
	if iptables(append([]string{"-t", "mangle", "-C"}, netpolJump...)...) == nil {
		if err := iptables(append([]string{"-t", "mangle", "-D"}, netpolJump...)...); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if iptables("-t", "mangle", "-n", "-L", netpolChain) == nil {
		for _, a := range []string{"-F", "-X"} {
			if err := iptables("-t", "mangle", a, netpolChain); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if exec.Command("nft", "list", "table", "inet", netpolTable).Run() == nil {
		if out, err := exec.Command("nft", "delete", "table", "inet", netpolTable).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Sprintf("nft delete table inet %s: %v: %s", netpolTable, err, strings.TrimSpace(string(out))))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("removing the NetworkPolicy rules: %s", strings.Join(errs, "; "))
	}
	return nil
}

func iptables(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
