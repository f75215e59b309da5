//go:build tools

// Package netpol pins kube-network-policies, the NetworkPolicy controller the
// single-node test cluster runs beside the bridge CNI, built from the Go module
// proxy.
package netpol

import _ "sigs.k8s.io/kube-network-policies/cmd"
