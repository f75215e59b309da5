// Package service runs the analysis service: it starts the informer cache,
// the optional Pulumi Cloud client, authentication, and the HTTP server
// (TLS reloaded from files when given), and stops them cleanly.
//
// cmd/stackflow-analysis parses flags into Options and calls Run.
package service
