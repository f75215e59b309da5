//go:build tools

// Package pulumi pins the pulumi CLI (engine) that tests and `make run` drive
// through the Automation API.
package pulumi

import _ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
