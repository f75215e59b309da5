// Package verification holds the answer to "did this Stack apply (or preview)
// this commit?": the response schema the analysis service serves (types.go),
// the query it accepts and its parser (query.go), and the pure function that
// derives the answer from a Stack and its Updates (verify.go).
//
// It imports the operator's API types and Kubernetes API machinery only; it
// reads no cluster state, so every answer is table-tested with an injected
// clock.
package verification
