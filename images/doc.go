// Package images builds Stackflow's container images without a Docker
// engine: it cross-compiles the binaries with go build, lays them out in
// reproducible tar layers on top of a minimal base (CA bundle, a nonroot
// user, no shell), writes each image set as a multi-platform OCI index into
// an OCI image layout, and pushes it to a registry when asked.
//
// What goes into an image is data (Spec, in stackflow.go): binaries and the
// paths they land at, the entrypoint, extra files and directories. Adding an
// image is adding one Spec.
//
// It may import go-containerregistry and the standard library; it runs the go
// and git commands but imports nothing from the rest of Stackflow, whose
// binaries it only builds.
package images
