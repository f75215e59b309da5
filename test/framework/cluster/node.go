package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cniBinDir is where Debian's containernetworking-plugins puts the plugins.
const cniBinDir = "/usr/lib/cni"

// kernelSettings are the sysctls the kubelet sets (protectKernelDefaults
// false: vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1)
// and the bridge plugin sets (net.ipv4.ip_forward=1 for its gateway); Stop
// puts back what they were.
var kernelSettings = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "net/ipv4/ip_forward"}

func lookPath(name string) (string, error) { return exec.LookPath(name) }

// startContainerd starts a mount namespace holder, then containerd inside that
// namespace with its own root, state, socket and CNI configuration.
func (c *Cluster) startContainerd(ctx context.Context) error {
	c.sysctls = map[string]string{}
	for _, k := range kernelSettings {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil {
			c.sysctls[k] = strings.TrimSpace(string(b))
		}
	}
	c.netnsAtStart = listNetns()
	if err := c.makeCgroupRoot(); err != nil {
		return err
	}
	// Every mount containerd and the kubelet make (rootfs overlays, sandbox
	// shm, network namespaces, projected volumes) is made in this namespace,
	// and goes away with its last process.
	holder, err := startProcess(c.logDir(), "mount-namespace", "unshare",
		[]string{"--mount", "--propagation", "private", "sleep", "infinity"}, nil)
	if err != nil {
		return err
	}
	c.mountNS = holder
	nsPath := fmt.Sprintf("/proc/%d/ns/mnt", holder.cmd.Process.Pid)
	if err := wait(ctx, 10*time.Second, "mount namespace", holder, func() (bool, error) {
		self, err1 := os.Readlink("/proc/self/ns/mnt")
		other, err2 := os.Readlink(nsPath)
		if err := errors.Join(err1, err2); err != nil {
			return false, err
		}
		return self != other, nil
	}); err != nil {
		return err
	}

	if err := c.makeBridge(); err != nil {
		return err
	}
	if err := c.writeCNIConfig(); err != nil {
		return err
	}
	c.sock = c.path("containerd", "containerd.sock")
	cfg := c.path("containerd", "config.toml")
	if err := os.WriteFile(cfg, []byte(c.containerdConfig()), 0o644); err != nil {
		return err
	}
	p, err := c.inMountNS("containerd", "containerd", "--config", cfg)
	if err != nil {
		return err
	}
	return wait(ctx, time.Minute, "containerd", p, func() (bool, error) {
		out, err := exec.CommandContext(ctx, "ctr", "--address", c.sock, "version").CombinedOutput()
		if err != nil {
			return false, fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
		}
		return true, nil
	})
}

// inMountNS starts a component in the mount namespace of the holder.
func (c *Cluster) inMountNS(name, bin string, args ...string) (*process, error) {
	path, err := lookPath(bin)
	if err != nil {
		path = bin
	}
	ns := fmt.Sprintf("--mount=/proc/%d/ns/mnt", c.mountNS.cmd.Process.Pid)
	return c.start(name, "nsenter", append([]string{ns, "--", path}, args...)...)
}

func (c *Cluster) containerdConfig() string {
	d := c.path("containerd")
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
plugin_dir = ""
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  # No CAP_SYS_RESOURCE here: containers may not get a lower OOM score
  # adjustment than containerd's own.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
    max_conf_num = 1
`, filepath.Join(d, "root"), filepath.Join(d, "state"), c.sock, c.sock+".ttrpc",
		filepath.Join(d, "opt"), c.opts.PauseImage, cniBinDir, c.path("cni", "net.d"))
}

// makeBridge creates the pods' bridge with the host's address on it now,
// rather than leaving it to the bridge plugin at the first pod, so that test
// servers can listen on GatewayIP from the start.
func (c *Cluster) makeBridge() error {
	_, subnet, err := net.ParseCIDR(c.opts.PodSubnet)
	if err != nil {
		return err
	}
	ones, _ := subnet.Mask.Size()
	for _, args := range [][]string{
		{"link", "add", c.bridge, "type", "bridge"},
		{"addr", "add", c.GatewayIP + "/" + strconv.Itoa(ones), "dev", c.bridge},
		{"link", "set", c.bridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// writeCNIConfig writes the bridge network: each pod gets an address of
// PodSubnet on the bridge, whose first address is the host's (the pods'
// gateway, masqueraded to the outside).
func (c *Cluster) writeCNIConfig() error {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "stackflow",
		"plugins": []map[string]any{
			{
				"type": "bridge", "bridge": c.bridge, "isGateway": true, "ipMasq": true, "hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": c.opts.PodSubnet, "gateway": c.GatewayIP}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": c.path("cni", "ipam"),
				},
			},
			{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.path("cni", "net.d"), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(c.path("containerd"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(c.path("cni", "net.d", "10-stackflow.conflist"), b, 0o644)
}

// importImages imports the OCI archives into containerd's k8s.io namespace,
// where the CRI plugin finds them.
func (c *Cluster) importImages(ctx context.Context) error {
	for _, a := range c.opts.Images {
		out, err := exec.CommandContext(ctx, "ctr", "--address", c.sock, "-n", "k8s.io", "images", "import", a).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr images import %s: %w: %s", a, err, strings.TrimSpace(string(out)))
		}
		c.logf("Cluster: imported %s: %s", filepath.Base(a), strings.TrimSpace(string(out)))
	}
	return nil
}

// ImportImage imports one more OCI archive into containerd.
func (c *Cluster) ImportImage(ctx context.Context, archive string) error {
	c.opts.Images = []string{archive}
	return c.importImages(ctx)
}

func (c *Cluster) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 0.0.0.0
port: %d
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %q
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://%s
# This machine has cgroup v1 (a hybrid hierarchy) and no systemd.
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupRoot: %s
cgroupsPerQOS: true
enforceNodeAllocatable: ["pods"]
failSwapOn: false
podLogsDir: %q
resolvConf: /etc/resolv.conf
maxPods: 30
rotateCertificates: false
serverTLSBootstrap: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
# The OOM killer's kernel messages (/dev/kmsg) may not be readable here.
kernelMemcgNotification: false
`, c.ports["kubelet"], c.pki.CAFile(), c.sock, c.cgroupRoot, c.path("pod-logs"))
}

func (c *Cluster) startKubelet(ctx context.Context) error {
	cfg := c.path("kubelet", "config.yaml")
	if err := os.MkdirAll(c.path("kubelet"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(cfg, []byte(c.kubeletConfig()), 0o644); err != nil {
		return err
	}
	p, err := c.inMountNS("kubelet", filepath.Join(c.opts.ClusterDir, "kubelet"),
		"--config="+cfg, "--kubeconfig="+c.kubeconfig("kubelet"),
		"--root-dir="+c.path("kubelet", "root"), "--cert-dir="+c.path("kubelet", "pki"),
		"--hostname-override="+NodeName, "--node-ip="+c.HostIP,
	)
	if err != nil {
		return err
	}
	return wait(ctx, 3*time.Minute, "node "+NodeName, p, func() (bool, error) { return c.nodeReady(ctx) })
}

// Stop tears the cluster down: it stops the controllers (so nothing
// recreates pods), deletes every pod and waits a little for the kubelet to
// stop them (removing their network), stops every process (kube-proxy's
// rules removed with kube-proxy --cleanup, kube-network-policies' table and
// queue rules removed), kills what is left in the pods'
// cgroups and the containerd shims, removes the cgroups, the bridge and the
// kubelet's iptables chains, puts the kernel settings back and removes Dir.
func (c *Cluster) Stop() error {
	start := time.Now()
	var errs []error
	byName := map[string]*process{}
	for _, p := range c.procs {
		byName[p.name] = p
	}
	stop := func(name string, grace time.Duration) {
		if p := byName[name]; p != nil {
			if err := p.stop(grace); err != nil {
				errs = append(errs, err)
			}
		}
	}
	stop("kube-controller-manager", 5*time.Second)
	stop("kube-scheduler", 5*time.Second)
	if c.Client != nil && byName["kubelet"] != nil {
		c.drain()
	}
	stop("kubelet", 10*time.Second)
	if byName["kube-proxy"] != nil {
		stop("kube-proxy", 5*time.Second)
		if err := c.cleanupKubeProxy(); err != nil {
			errs = append(errs, err)
		}
	}
	if byName[netpolName] != nil {
		stop(netpolName, 5*time.Second)
		if err := cleanupNetworkPolicies(); err != nil {
			errs = append(errs, err)
		}
	}
	stop("kube-apiserver", 10*time.Second)
	stop("etcd", 10*time.Second)
	c.killPods()
	stop("containerd", 10*time.Second)
	if err := c.mountNS.stop(time.Second); err != nil {
		errs = append(errs, err)
	}
	if cpu, ok := c.podsCPU(); ok {
		c.logf("Cluster: its pods used %s of CPU", cpu.Round(time.Millisecond))
	}
	errs = append(errs, c.removeCgroupRoot())
	if c.bridge != "" {
		if out, err := exec.Command("ip", "link", "del", c.bridge).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
			errs = append(errs, fmt.Errorf("ip link del %s: %w: %s", c.bridge, err, out))
		}
	}
	if err := removeCNIRules(); err != nil {
		errs = append(errs, err)
	}
	if byName["kubelet"] != nil {
		if err := removeKubeletChains(); err != nil {
			errs = append(errs, err)
		}
	}
	for n := range listNetns() {
		if c.netnsAtStart != nil && !c.netnsAtStart[n] && strings.HasPrefix(n, "cni-") {
			_ = os.Remove(filepath.Join("/run/netns", n))
		}
	}
	for k, v := range c.sysctls {
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s=%s: %w", k, v, err))
		}
	}
	if c.opts.Dir == "" && c.Dir != "" {
		if os.Getenv("STACKFLOW_CLUSTER_KEEP") != "" {
			c.logf("Cluster: kept %s (STACKFLOW_CLUSTER_KEEP)", c.Dir)
		} else if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	if c.lock != nil {
		c.lock.Close() // releases the flock
		c.lock = nil
	}
	c.logf("Cluster: stopped in %s", time.Since(start).Round(time.Millisecond))
	return errors.Join(errs...)
}

// drain deletes every pod at once and waits up to 30s for the kubelet to have
// stopped them, so that the CNI plugin removes their addresses and rules.
func (c *Cluster) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nss, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	zero := int64(0)
	for _, ns := range nss.Items {
		_ = c.Client.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	}
	for ctx.Err() == nil {
		out, err := exec.CommandContext(ctx, "ctr", "--address", c.sock, "-n", "k8s.io", "tasks", "ls", "-q").Output()
		if err == nil && strings.TrimSpace(string(out)) == "" {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	c.logf("Cluster: pods still running after 30s; killing them")
}

// killPods kills every process in the pods' cgroups and every containerd shim
// of this cluster's socket.
func (c *Cluster) killPods() {
	for _, h := range cgroupHierarchies() {
		root := filepath.Join(h, c.cgroupRoot)
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
	if c.sock == "" {
		return
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if strings.HasSuffix(args[0], "containerd-shim-runc-v2") && strings.Contains(string(b), c.sock) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// cgroupHierarchies are the mounted cgroup hierarchies: each v1 controller's
// and the unified one.
func cgroupHierarchies() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		for i, x := range f {
			if x == "-" && i+1 < len(f) && (f[i+1] == "cgroup" || f[i+1] == "cgroup2") {
				out = append(out, f[4])
			}
		}
	}
	return out
}

// makeCgroupRoot creates the kubelet's cgroupRoot in every hierarchy (the
// kubelet requires it to exist); a cpuset cgroup needs its parent's CPUs and
// memory nodes before it can hold tasks.
func (c *Cluster) makeCgroupRoot() error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, c.cgroupRoot)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					return fmt.Errorf("cgroup %s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// podsCPU is the CPU time the pods have used (every process in cgroupRoot:
// cgroup v1's cpuacct.usage, v2's cpu.stat usage_usec, which count the
// cgroups removed below it too). The test process's own CPU time does not
// hold it: the pods' processes are children of containerd's shims, which
// leave the test process's tree.
func (c *Cluster) podsCPU() (time.Duration, bool) {
	if c.cgroupRoot == "" {
		return 0, false
	}
	hs := cgroupHierarchies()
	// On a hybrid machine the kubelet puts the pods in v1's hierarchies
	// only: the v2 one's cgroup stays empty.
	for _, h := range hs {
		if b, err := os.ReadFile(filepath.Join(h, c.cgroupRoot, "cpuacct.usage")); err == nil {
			if ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
				return time.Duration(ns), true
			}
		}
	}
	for _, h := range hs {
		if b, err := os.ReadFile(filepath.Join(h, c.cgroupRoot, "cpu.stat")); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "usage_usec" {
					if us, err := strconv.ParseInt(f[1], 10, 64); err == nil {
						return time.Duration(us) * time.Microsecond, true
					}
				}
			}
		}
	}
	return 0, false
}

// removeCgroupRoot removes the cgroups under cgroupRoot, deepest first,
// retrying while killed processes exit.
func (c *Cluster) removeCgroupRoot() error {
	if c.cgroupRoot == "" {
		return nil
	}
	var last error
	for range 50 {
		last = nil
		for _, h := range cgroupHierarchies() {
			root := filepath.Join(h, c.cgroupRoot)
			var dirs []string
			_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
					last = fmt.Errorf("rmdir %s: %w", dirs[i], err)
				}
			}
		}
		if last == nil {
			return nil
		}
		c.killPods()
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

func listNetns() map[string]bool {
	out := map[string]bool{}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		out[e.Name()] = true
	}
	return out
}

// removeCNIRules deletes the NAT rules and chains the bridge plugin's ipMasq
// left for pods whose network was never torn down (killed rather than
// stopped): those whose comment names the "stackflow" network. Only one
// cluster runs on a machine at a time (Start takes a lock), so they are this
// one's.
func removeCNIRules() error {
	out, err := exec.Command("iptables", "-t", "nat", "-L", "POSTROUTING", "-n", "--line-numbers").Output()
	if err != nil {
		return fmt.Errorf("iptables -t nat -L POSTROUTING: %w", err)
	}
	var nums []string
	chains := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.Contains(line, `name: "stackflow"`) {
			continue
		}
		nums = append(nums, f[0])
		if strings.HasPrefix(f[1], "CNI-") {
			chains[f[1]] = true
		}
	}
	var errs []error
	for i := len(nums) - 1; i >= 0; i-- { // from the bottom, so numbers stay valid
		if out, err := exec.Command("iptables", "-t", "nat", "-D", "POSTROUTING", nums[i]).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("iptables -t nat -D POSTROUTING %s: %w: %s", nums[i], err, out))
		}
	}
	// Chains of ours whose rule went already (the plugin's DEL was cut
	// short): CNI- chains that nothing references and that hold nothing but
	// rules of the stackflow network.
	if out, err := exec.Command("iptables", "-t", "nat", "-L", "-n").Output(); err == nil {
		var cur string
		only := map[string]bool{}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) >= 3 && f[0] == "Chain" && strings.HasPrefix(f[1], "CNI-") && f[2] == "(0":
				cur = f[1]
				only[cur] = true
			case len(f) >= 1 && f[0] == "Chain":
				cur = ""
			case cur != "" && len(f) > 0 && f[0] != "target" && !strings.Contains(line, `name: "stackflow"`):
				only[cur] = false
			}
		}
		for ch, ours := range only {
			if ours {
				chains[ch] = true
			}
		}
	}
	for ch := range chains {
		_ = exec.Command("iptables", "-t", "nat", "-F", ch).Run()
		if out, err := exec.Command("iptables", "-t", "nat", "-X", ch).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("iptables -t nat -X %s: %w: %s", ch, err, out))
		}
	}
	return errors.Join(errs...)
}

// lockFile keeps a second cluster from starting on the machine while one
// runs: they would share the pod subnet, the CNI network's name and the
// kernel settings Stop restores (the second would record the first's).
const lockFile = "/run/lock/stackflow-cluster.lock"

// lockMachine takes lockFile, failing at once when another process holds it.
func lockMachine() (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(lockFile), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(lockFile)
		f.Close()
		return nil, fmt.Errorf("another Stackflow test cluster runs on this machine (pid %s holds %s)", strings.TrimSpace(string(holder)), lockFile)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

// kubeletChains are the iptables chains the kubelet makes (its canary, the
// hint kube-proxy reads to pick a backend, and KUBE-FIREWALL, which drops
// non-loopback packets to 127.0.0.0/8), in every table, for IPv4 and IPv6.
var kubeletChains = []string{"KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"}

// removeKubeletChains deletes the jumps to kubeletChains and the chains,
// after the kubelet has stopped; absent ones are skipped.
func removeKubeletChains() error {
	var errs []error
	for _, bin := range []string{"iptables", "ip6tables"} {
		if _, err := lookPath(bin); err != nil {
			continue
		}
		for _, table := range []string{"filter", "nat", "mangle", "raw"} {
			out, err := exec.Command(bin, "-t", table, "-S").Output()
			if err != nil {
				continue // no such table here
			}
			present := map[string]bool{}
			var jumps [][]string
			for _, line := range strings.Split(string(out), "\n") {
				f := strings.Fields(line)
				switch {
				case len(f) == 2 && f[0] == "-N" && slices.Contains(kubeletChains, f[1]):
					present[f[1]] = true
				case len(f) >= 4 && f[0] == "-A" && !slices.Contains(kubeletChains, f[1]) && f[len(f)-2] == "-j" && slices.Contains(kubeletChains, f[len(f)-1]):
					jumps = append(jumps, append([]string{"-t", table, "-D"}, f[1:]...))
				}
			}
			for _, j := range jumps {
				if out, err := exec.Command(bin, j...).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("%s %s: %w: %s", bin, strings.Join(j, " "), err, out))
				}
			}
			for ch := range present {
				_ = exec.Command(bin, "-t", table, "-F", ch).Run()
				if out, err := exec.Command(bin, "-t", table, "-X", ch).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("%s -t %s -X %s: %w: %s", bin, table, ch, err, out))
				}
			}
		}
	}
	return errors.Join(errs...)
}
