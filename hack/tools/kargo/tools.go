//go:build tools

// Package kargo pins Kargo's control plane (one binary: controller,
// kubernetes-webhooks-server, management-controller, …) and its git askpass
// program credential-helper, built from Kargo's shared source
// (hack/gen-tools-argo-kargo.sh).
package kargo

import (
	_ "github.com/akuity/kargo/cmd/controlplane"
	_ "github.com/akuity/kargo/cmd/credential-helper"
)
