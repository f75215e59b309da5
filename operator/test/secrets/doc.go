// Package secrets is the end-to-end test that no secret value reaching a
// workspace shows in an Update's or a Stack's status, an event, the operator's
// log or an agent's log: for each path a secret can take (secretsRef, the
// deprecated secrets and envSecrets, envRefs of type Secret, envFrom Secrets of
// the workspace template, git credentials, secret outputs of each JSON type)
// it plants a distinct value, makes the test provider echo it in an error and
// an output, and searches everything written for it.
//
// It imports the operator API, the in-process operator, the local workspace
// runtime and the test substrate, git repositories and provider.
package secrets
