// Package httperror is the one way Stackflow's HTTP servers answer an error:
// a JSON body {code, reason, message, requestID} where reason is a PascalCase
// constant a client can match on, message is the server's own words (bounded,
// URL credentials masked), and requestID names the log line that holds the
// detail of a failure on the server's side. That detail (an API server's URL,
// a ServiceAccount, client-go's text) goes to the server's log, never to the
// caller: Fail logs it, with URL credentials masked by internal/redact, and
// answers a fixed message.
//
// The analysis service, the operator's metrics, probe, artifact and push
// webhook servers use it. It imports the standard library, logr and
// internal/redact.
package httperror
