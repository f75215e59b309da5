//go:build tools

// The module also pins Argo CD's whole multi-call binary (CLI included), so
// that `go build github.com/argoproj/argo-cd/v2/cmd` works here, e.g. to
// compare its build with the components' (main.go).
package main

import _ "github.com/argoproj/argo-cd/v2/cmd"
