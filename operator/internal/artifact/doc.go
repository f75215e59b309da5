// Package artifact publishes program tarballs: a content-addressed store on
// disk (one directory per object, one <sha256>.tar.gz file per content), an
// http.Handler that serves exactly those files to workspaces, and a
// deterministic tarball builder so the same files always yield the same digest.
//
// It imports only the standard library; the controllers decide what goes in.
package artifact
