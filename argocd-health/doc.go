// Package argocdhealth will hold Argo CD health checks (Lua) and resource actions
// for Stack, Program, Workspace and Update, tested through Argo CD's own Lua VM.
// Not yet implemented: see the argocd-health issue.
package argocdhealth
