// Package clustere2e holds the end-to-end tests that run on a real
// single-node cluster (test/framework/cluster): workspace pods are scheduled,
// started by a kubelet under the restricted Pod Security level, and reached
// on their pod IPs. The tests build only with the cluster tag
// (make test-cluster), so `go test ./...` leaves them out: they need root
// and the cluster substrate (hack/substrate.sh cluster). make test runs them
// beside it where hack/substrate.sh cluster-check finds that the machine can.
package clustere2e
