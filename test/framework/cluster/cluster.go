package cluster

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// NodeName is the name of the cluster's only node.
const NodeName = "stackflow-node"

// Options say where the binaries are and how to set the cluster up.
type Options struct {
	// Dir holds everything the cluster writes; empty means a new directory
	// under /tmp (short: containerd's socket path must fit in 108 bytes),
	// removed by Stop.
	Dir string
	// KubeDir holds kube-apiserver and etcd ($KUBEBUILDER_ASSETS); ClusterDir
	// holds kube-controller-manager, kube-scheduler and kubelet
	// ($STACKFLOW_CLUSTER); NetpolDir holds kube-network-policies
	// ($STACKFLOW_NETPOL). Empty: read from the environment.
	KubeDir, ClusterDir, NetpolDir string
	// Images are OCI archives imported into containerd before the kubelet
	// starts; PauseImage (the kubelet's sandbox image) must be one of them.
	Images     []string
	PauseImage string
	// PodSubnet is the bridge network's range; empty means 10.244.0.0/24.
	// Its first address is the host's on the bridge (Cluster.GatewayIP).
	PodSubnet string
	// ServiceSubnet is the Service ClusterIP range; empty means 10.96.0.0/16.
	ServiceSubnet string
	// UseServiceAccountCredentials runs each controller of
	// kube-controller-manager with its own service account, as kubeadm does.
	UseServiceAccountCredentials bool
	// Logf receives progress lines (with the time each phase took).
	Logf func(format string, args ...any)
}

// Cluster is a running single-node cluster.
type Cluster struct {
	// Dir holds the cluster's files; logs are in Dir/logs.
	Dir string
	// Kubeconfig is the path of an admin (system:masters) kubeconfig.
	Kubeconfig string
	// Config is the admin client configuration.
	Config *rest.Config
	// Client is an admin clientset.
	Client kubernetes.Interface
	// HostIP is the node's InternalIP (the host's address on its default
	// route); GatewayIP is the host's address on the pod bridge, where pods
	// reach servers on the host.
	HostIP, GatewayIP string
	// PodSubnet is the pods' address range, reachable from the host.
	PodSubnet string

	opts         Options
	logf         func(string, ...any)
	pki          *pki
	procs        []*process // in start order
	mountNS      *process
	sock         string
	bridge       string
	cgroupRoot   string
	sysctls      map[string]string
	netnsAtStart map[string]bool
	ports        map[string]int
	certs        certs
	lock         *os.File // lockFile, released by Stop

	netpolDataplane string // see NetworkPolicyDataplane
}

// Start starts a cluster and waits until its node is Ready. On error, what
// was started is stopped.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the cluster needs root (containerd, the kubelet and the bridge network)")
	}
	if opts.KubeDir == "" || opts.ClusterDir == "" || opts.NetpolDir == "" {
		paths, err := substrate.Locate()
		if err != nil {
			return nil, err
		}
		opts.KubeDir = cmp.Or(opts.KubeDir, paths.KubeAssets)
		opts.ClusterDir = cmp.Or(opts.ClusterDir, paths.Cluster)
		opts.NetpolDir = cmp.Or(opts.NetpolDir, paths.Netpol)
	}
	if opts.PodSubnet == "" {
		opts.PodSubnet = "10.244.0.0/24"
	}
	if opts.ServiceSubnet == "" {
		opts.ServiceSubnet = "10.96.0.0/16"
	}
	if opts.PauseImage == "" {
		return nil, errors.New("no pause image")
	}
	if err := checkBinaries(opts); err != nil {
		return nil, err
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	lock, err := lockMachine()
	if err != nil {
		return nil, err
	}
	id := randomID()
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("/tmp", "sfc-"); err != nil {
			lock.Close()
			return nil, err
		}
	}
	c := &Cluster{
		Dir: dir, opts: opts, logf: logf, PodSubnet: opts.PodSubnet, lock: lock,
		bridge: "sf" + id, cgroupRoot: "/stackflow-" + id,
	}
	defer func() {
		if err != nil {
			if serr := c.Stop(); serr != nil {
				logf("Stopping the cluster after a failed start: %v", serr)
			}
		}
	}()
	if err := os.MkdirAll(c.logDir(), 0o755); err != nil {
		return nil, err
	}
	if c.HostIP, err = hostIP(); err != nil {
		return nil, err
	}
	_, subnet, err := net.ParseCIDR(opts.PodSubnet)
	if err != nil {
		return nil, fmt.Errorf("pod subnet: %w", err)
	}
	gw := subnet.IP.To4()
	c.GatewayIP = net.IPv4(gw[0], gw[1], gw[2], gw[3]+1).String()
	c.ports = map[string]int{}
	for _, name := range []string{"etcd", "etcd-peer", "apiserver", "kubelet", "kube-proxy-healthz", "kube-proxy-metrics", "netpol-metrics"} {
		if c.ports[name], err = freePort(); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	phase := func(name string, f func(context.Context) error) error {
		t := time.Now()
		if err := f(ctx); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		logf("Cluster: %s in %s", name, time.Since(t).Round(time.Millisecond))
		return nil
	}
	for _, p := range []struct {
		name string
		f    func(context.Context) error
	}{
		{"certificates", c.writePKI},
		{"etcd", c.startEtcd},
		{"kube-apiserver", c.startAPIServer},
		{"kube-controller-manager and kube-scheduler", c.startControllers},
		{"containerd", c.startContainerd},
		{"image import", c.importImages},
		{"kubelet and a Ready node", c.startKubelet},
		{"kube-proxy and the kubernetes Service's rules", c.startKubeProxy},
		{"kube-network-policies listening on its queue", c.startNetworkPolicies},
		{"default service account", c.waitDefaultServiceAccount},
	} {
		if err := phase(p.name, p.f); err != nil {
			return nil, err
		}
	}
	logf("Cluster: started in %s (kubeconfig %s, logs in %s)", time.Since(start).Round(time.Millisecond), c.Kubeconfig, c.logDir())
	return c, nil
}

func checkBinaries(opts Options) error {
	var missing []string
	for _, f := range []string{
		filepath.Join(opts.KubeDir, "etcd"), filepath.Join(opts.KubeDir, "kube-apiserver"),
		filepath.Join(opts.ClusterDir, "kube-controller-manager"), filepath.Join(opts.ClusterDir, "kube-scheduler"),
		filepath.Join(opts.ClusterDir, "kubelet"), filepath.Join(opts.ClusterDir, "kube-proxy"),
		filepath.Join(opts.NetpolDir, netpolName),
	} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f)
		}
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter", "unshare", "ip", "iptables", "nft"} {
		if _, err := lookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if _, err := os.Stat(filepath.Join(cniBinDir, "bridge")); err != nil {
		missing = append(missing, filepath.Join(cniBinDir, "bridge"))
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s: run hack/substrate.sh cluster", strings.Join(missing, ", "))
	}
	return nil
}

func (c *Cluster) logDir() string { return filepath.Join(c.Dir, "logs") }
func (c *Cluster) path(elem ...string) string {
	return filepath.Join(append([]string{c.Dir}, elem...)...)
}

func (c *Cluster) start(name, bin string, args ...string) (*process, error) {
	p, err := startProcess(c.logDir(), name, bin, args, nil)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// wait polls ready every 200ms until it returns true, p exits, or timeout.
func wait(ctx context.Context, timeout time.Duration, what string, p *process, ready func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if p != nil {
			if done, err := p.exited(); done {
				return fmt.Errorf("%w (see %s)", err, p.log.Name())
			}
		}
		ok, err := ready()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%s: not ready after %s: %w", what, timeout, last)
			}
			return fmt.Errorf("%s: not ready after %s", what, timeout)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

type certs struct {
	apiserver, apiserverKey         string
	kubeletClient, kubeletClientKey string
	saKey, saPub                    string
}

func (c *Cluster) writePKI(context.Context) error {
	p, err := newPKI(c.path("pki"))
	if err != nil {
		return err
	}
	c.pki = p
	if c.certs.apiserver, c.certs.apiserverKey, err = p.issue("apiserver", "kube-apiserver", nil, []string{
		"127.0.0.1", c.HostIP, c.serviceIP(), "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
	}); err != nil {
		return err
	}
	if c.certs.kubeletClient, c.certs.kubeletClientKey, err = p.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil); err != nil {
		return err
	}
	if c.certs.saKey, c.certs.saPub, err = p.serviceAccountKey(); err != nil {
		return err
	}
	for _, k := range []struct{ name, cn, org string }{
		{"admin", "stackflow-admin", "system:masters"},
		{"controller-manager", "system:kube-controller-manager", ""},
		{"scheduler", "system:kube-scheduler", ""},
		{"kubelet", "system:node:" + NodeName, "system:nodes"},
		// Bound to system:node-proxier by the API server's default RBAC.
		{"kube-proxy", "system:kube-proxy", ""},
	} {
		var orgs []string
		if k.org != "" {
			orgs = []string{k.org}
		}
		cert, key, err := p.issue(k.name, k.cn, orgs, nil)
		if err != nil {
			return err
		}
		if err := c.writeKubeconfig(k.name, cert, key); err != nil {
			return err
		}
	}
	c.Kubeconfig = c.kubeconfig("admin")
	return nil
}

// serviceIP is the kubernetes Service's ClusterIP, the first of the range.
func (c *Cluster) serviceIP() string {
	_, n, err := net.ParseCIDR(c.opts.ServiceSubnet)
	if err != nil {
		return "10.96.0.1"
	}
	ip := n.IP.To4()
	return net.IPv4(ip[0], ip[1], ip[2], ip[3]+1).String()
}

func (c *Cluster) kubeconfig(name string) string { return c.path("pki", name+".kubeconfig") }

func (c *Cluster) apiPort() int { return c.ports["apiserver"] }

func (c *Cluster) writeKubeconfig(name, cert, key string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["stackflow"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:" + strconv.Itoa(c.apiPort()), CertificateAuthority: c.pki.CAFile()}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificate: cert, ClientKey: key}
	cfg.Contexts["stackflow"] = &clientcmdapi.Context{Cluster: "stackflow", AuthInfo: name}
	cfg.CurrentContext = "stackflow"
	return clientcmd.WriteToFile(*cfg, c.kubeconfig(name))
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	client, peer := c.ports["etcd"], c.ports["etcd-peer"]
	url := "http://127.0.0.1:" + strconv.Itoa(client)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	p, err := c.start("etcd", filepath.Join(c.opts.KubeDir, "etcd"),
		"--name=stackflow", "--data-dir="+c.path("etcd"),
		"--listen-client-urls="+url, "--advertise-client-urls="+url,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=stackflow="+peerURL, "--unsafe-no-fsync", "--log-level=warn")
	if err != nil {
		return err
	}
	return wait(ctx, time.Minute, "etcd", p, func() (bool, error) {
		resp, err := http.Get(url + "/health")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	p, err := c.start("kube-apiserver", filepath.Join(c.opts.KubeDir, "kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:"+strconv.Itoa(c.ports["etcd"]),
		"--bind-address=0.0.0.0", "--advertise-address="+c.HostIP,
		"--secure-port="+strconv.Itoa(c.apiPort()),
		"--cert-dir="+c.path("apiserver-certs"),
		"--tls-cert-file="+c.certs.apiserver, "--tls-private-key-file="+c.certs.apiserverKey,
		"--client-ca-file="+c.pki.CAFile(),
		"--kubelet-client-certificate="+c.certs.kubeletClient, "--kubelet-client-key="+c.certs.kubeletClientKey,
		// The node name does not resolve; its InternalIP is the host's.
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-key-file="+c.certs.saPub, "--service-account-signing-key-file="+c.certs.saKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range="+c.opts.ServiceSubnet,
		"--authorization-mode=Node,RBAC",
		// ServiceAccount and PodSecurity are on by default; NodeRestriction
		// limits the kubelet to its own node and pods.
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--profiling=false",
	)
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	c.Config = cfg
	if c.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	return wait(ctx, 3*time.Minute, "kube-apiserver", p, func() (bool, error) {
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", err
	})
}

func (c *Cluster) startControllers(ctx context.Context) error {
	if _, err := c.start("kube-controller-manager", filepath.Join(c.opts.ClusterDir, "kube-controller-manager"),
		"--kubeconfig="+c.kubeconfig("controller-manager"),
		"--authentication-kubeconfig="+c.kubeconfig("controller-manager"),
		"--authorization-kubeconfig="+c.kubeconfig("controller-manager"),
		"--secure-port=0", "--leader-elect=false",
		// The token controller and the root CA published to every namespace.
		"--service-account-private-key-file="+c.certs.saKey, "--root-ca-file="+c.pki.CAFile(),
		"--use-service-account-credentials="+strconv.FormatBool(c.opts.UseServiceAccountCredentials),
		"--controllers=*",
		"--service-cluster-ip-range="+c.opts.ServiceSubnet,
	); err != nil {
		return err
	}
	_, err := c.start("kube-scheduler", filepath.Join(c.opts.ClusterDir, "kube-scheduler"),
		"--kubeconfig="+c.kubeconfig("scheduler"),
		"--authentication-kubeconfig="+c.kubeconfig("scheduler"),
		"--authorization-kubeconfig="+c.kubeconfig("scheduler"),
		"--secure-port=0", "--leader-elect=false",
	)
	return err
}

func (c *Cluster) waitDefaultServiceAccount(ctx context.Context) error {
	return wait(ctx, 2*time.Minute, "the default ServiceAccount", nil, func() (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	})
}

// nodeReady reports whether the node's Ready condition is True.
func (c *Cluster) nodeReady(ctx context.Context) (bool, error) {
	n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			if cond.Status == corev1.ConditionTrue {
				return true, nil
			}
			return false, fmt.Errorf("node %s: %s: %s", NodeName, cond.Reason, cond.Message)
		}
	}
	return false, fmt.Errorf("node %s has no Ready condition", NodeName)
}

// hostIP is the source address of the host's default route.
func hostIP() (string, error) {
	conn, err := net.Dial("udp", "203.0.113.1:9") // nothing is sent
	if err != nil {
		return "", fmt.Errorf("finding the host's address: %w", err)
	}
	defer conn.Close()
	return conn.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
