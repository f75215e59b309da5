// Package cluster starts a single-node Kubernetes cluster from real
// components for end-to-end tests and `make cluster`: etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler (built by hack/substrate.sh kube
// and cluster), containerd and runc (Debian's packages) with a bridge CNI
// network (containernetworking-plugins), a kubelet and kube-proxy (iptables
// mode, so pods reach Services' ClusterIPs, the API server's among them) and
// kube-network-policies (built by hack/substrate.sh netpol), which enforces
// NetworkPolicies beside the bridge CNI.
// Workspace pods really run: images are imported into containerd from OCI
// archives (package images: the pause image is the kubelet's sandbox, the
// test workspace image holds the agent, pulumi and the test provider, the
// operator image is the chart's), since no registry is reachable.
//
// Everything lives under one temporary directory and is torn down by Stop:
// the processes die with the test process (Pdeathsig), containerd and the
// kubelet run in a private mount namespace (so every mount they make goes
// away with it), the pods' cgroups are emptied and removed, the bridge, the
// iptables chains of the bridge plugin, kube-proxy and the kubelet, and the
// NetworkPolicy table and queue rules, are deleted and the kernel settings they change are restored.
//
// It needs root (the machine and CI run as root). It imports package images,
// client-go and the Kubernetes API types, nothing of the operator.
package cluster
