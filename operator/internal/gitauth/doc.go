// Package gitauth owns git credentials end to end: their types
// (Credentials), how the deprecated gitAuthSecret maps to a Workspace's
// Secret references (FromLegacySecret; spec.gitAuth is mapped by package
// stack, from its one walk of a Stack's references), how those references
// are read (Read) or handed to a workspace as environment variables (PodEnv,
// Credentials.Env) and decoded by the agent (FromEnv), and
// the go-git authentication they make (Credentials.Method): basic auth,
// tokens, SSH keys verified against known_hosts, and GitHub App installation
// tokens (AppTokens), exchanged only with an API URL CheckAPIURL accepts.
//
// The operator (branch resolution), both workspace runtimes and the agent
// use it, so the environment variable names and their meaning live here
// only. Credential values are secrets: they never appear in an error, and
// Secrets lists them for redaction.
//
// It imports the API types, go-git, golang.org/x/crypto/ssh and a JWT
// library; nothing of the operator's.
package gitauth
