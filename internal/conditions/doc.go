// Package conditions reads kstatus conditions of one object from another's
// point of view: a condition counts only for the generation it observed
// (Current). The operator's controllers and the verification service read
// Workspaces' and Stacks' conditions through it, so a condition written for
// an older spec never decides anything about the current one.
//
// It imports only the Kubernetes API machinery.
package conditions
