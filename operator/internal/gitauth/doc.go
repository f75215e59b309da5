// Package gitauth owns git credentials end to end: their types
// (Credentials), how a Stack's spec.gitAuth and the deprecated gitAuthSecret
// map to a Workspace's Secret references (FromStack, FromLegacySecret), how
// those references are read (Read) or handed to a workspace as environment
// variables (PodEnv, Credentials.Env) and decoded by the agent (FromEnv), and
// the go-git authentication they make (Credentials.Method): basic auth,
// tokens, SSH keys verified against known_hosts, and GitHub App installation
// tokens (AppTokens).
//
// The operator (branch resolution), both workspace runtimes and the agent
// use it, so the environment variable names and their meaning live here
// only. Credential values are secrets: they never appear in an error, and
// Secrets lists them for redaction.
//
// It imports the API types, go-git, golang.org/x/crypto/ssh and a JWT
// library; nothing of the operator's.
package gitauth
