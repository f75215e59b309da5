// Package cloudtest holds a local stand-in for the Pulumi Cloud REST API:
// an httptest server that implements the routes package pulumicloud reads
// (list stack updates, latest update, list previews) with the documented
// request headers, status codes and JSON shapes, so that the client is
// tested against the wire format rather than against its own structs.
//
// Tests add stacks and updates, change an update's result as it runs,
// inject 429 (with Retry-After), 5xx, 403 and dropped connections, and
// count the requests the server received.
//
// It imports the standard library only (no pulumicloud, no verification),
// so that its JSON is written from the documentation and not from the
// client it tests. Only tests may import it.
package cloudtest
