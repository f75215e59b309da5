// Package export holds what Stackflow writes of a Stack's outputs into
// Kubernetes objects (issue 34, not wired yet): the mapping of outputs, or
// values inside them, to the keys of a ConfigMap and a Secret, the refusal
// to put a secret output anywhere but a Secret, and the content hash a
// consumer rolls on. Decisions only: it reads no object and writes none.
//
// It imports the standard library only.
package export
