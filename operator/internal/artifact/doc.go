// Package artifact publishes program tarballs: a content-addressed store on
// disk (one directory per object, one <sha256>.tar.gz file per content), an
// http.Handler that serves exactly those files to workspaces, and a
// deterministic tarball builder so the same files always yield the same digest.
//
// Errors are answered with internal/httperror; the detail of a failed render
// goes to the store's log under the answer's request ID, never to the client.
//
// It imports the standard library, logr and internal/httperror; the
// controllers decide what goes in.
package artifact
