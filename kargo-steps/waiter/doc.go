// Package waiter holds the client side of a promotion's last step: it asks
// the analysis service whether a Stack applied a commit, with long polls,
// until the answer is Succeeded or Failed or the time is up, retrying
// transient trouble (the service restarting, a 5xx) and giving up at once on
// what retrying cannot fix (a 400, 401 or 403).
//
// It imports the analysis service's verification schema only.
package waiter
