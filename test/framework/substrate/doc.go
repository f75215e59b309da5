// Package substrate gives tests the real parts they run against: a Kubernetes
// control plane (kube-apiserver + etcd built by hack/substrate.sh, started through
// controller-runtime's envtest with the Stackflow CRDs installed), and a Pulumi
// environment (the pulumi CLI, the YAML language host, the repository's test
// resource provider installed as a plugin, a file:// backend).
//
// When a binary is missing the test fails with the command that obtains it; it
// never skips.
//
// It imports the operator API, controller-runtime and the Pulumi SDK.
package substrate
