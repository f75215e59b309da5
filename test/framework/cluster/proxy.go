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
)

// proxyKernelSettings are sysctls kube-proxy may write. The configuration
// below asks it to leave the conntrack table size and timeouts as they are
// (maxPerCore 0, timeouts 0: nf_conntrack_max and the TCP timeouts are
// read-only or absent in some sandboxes, and are the machine's, not the
// cluster's) and not to route localhost NodePorts (localhostNodePorts false,
// which would set route_localnet); Stop still puts these back, in case.
var proxyKernelSettings = []string{"net/ipv4/conf/all/route_localnet", "net/bridge/bridge-nf-call-iptables"}

// kubeProxyConfig is the KubeProxyConfiguration: iptables mode, the node's
// address as its own, the pod subnet as local traffic.
func (c *Cluster) kubeProxyConfig() string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %q
hostnameOverride: %s
bindAddress: %s
clusterCIDR: %s
detectLocalMode: ClusterCIDR
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
# NodePorts on the node's InternalIP only, not on every local address.
nodePortAddresses: ["primary"]
# Leave the machine's conntrack settings alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  # true sets net.ipv4.conf.all.route_localnet=1.
  localhostNodePorts: false
  minSyncPeriod: 0s
  syncPeriod: 30s
# Lowering its OOM score needs CAP_SYS_RESOURCE.
oomScoreAdj: 0
`, c.kubeconfig("kube-proxy"), NodeName, c.HostIP, c.opts.PodSubnet, c.ports["kube-proxy-healthz"], c.ports["kube-proxy-metrics"])
}

// startKubeProxy runs kube-proxy in the host's namespaces (it programs the
// host's iptables) as system:kube-proxy (bound to system:node-proxier by
// the API server's default RBAC), and waits until the kubernetes Service's
// ClusterIP has its rules, so that pods reach the API server through
// in-cluster configuration.
func (c *Cluster) startKubeProxy(ctx context.Context) error {
	for _, k := range proxyKernelSettings {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil {
			c.sysctls[k] = strings.TrimSpace(string(b))
		}
	}
	cfg := c.path("kube-proxy", "config.yaml")
	if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(cfg, []byte(c.kubeProxyConfig()), 0o644); err != nil {
		return err
	}
	p, err := c.start("kube-proxy", filepath.Join(c.opts.ClusterDir, "kube-proxy"), "--config="+cfg)
	if err != nil {
		return err
	}
	healthz := "http://127.0.0.1:" + strconv.Itoa(c.ports["kube-proxy-healthz"]) + "/healthz"
	return wait(ctx, time.Minute, "kube-proxy", p, func() (bool, error) {
		resp, err := http.Get(healthz)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("%s: %s", healthz, resp.Status)
		}
		out, err := exec.CommandContext(ctx, "iptables", "-t", "nat", "-S", "KUBE-SERVICES").CombinedOutput()
		if err != nil {
			return false, fmt.Errorf("iptables -t nat -S KUBE-SERVICES: %w: %s", err, strings.TrimSpace(string(out)))
		}
		if !strings.Contains(string(out), c.serviceIP()+"/32") {
			return false, fmt.Errorf("no rule for the kubernetes Service's ClusterIP %s yet", c.serviceIP())
		}
		return true, nil
	})
}

// cleanupKubeProxy removes kube-proxy's chains and rules (kube-proxy
// --cleanup), after kube-proxy has stopped.
func (c *Cluster) cleanupKubeProxy() error {
	out, err := exec.Command(filepath.Join(c.opts.ClusterDir, "kube-proxy"), "--cleanup").CombinedOutput()
	if err != nil {
		return fmt.Errorf("kube-proxy --cleanup: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
