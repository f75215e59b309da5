// Package gitremote is every conversation of the operator and the agent with a
// git server (listing references, fetching), each held within a budget: a
// whole-operation timeout, a connect timeout, an idle timeout (the peer sending
// nothing) and a cap on the bytes read, whatever the peer does — answer
// nothing, answer a byte a second, or advertise references for ever.
//
// go-git bounds neither the SSH handshake (it dials and handshakes without the
// caller's context) nor what it reads. Every connection is therefore made by
// this package: the SSH transport's through a proxy dialer registered with
// golang.org/x/net/proxy (go-git's one hook for SSH connections), the smart
// HTTP transport's through the http.Client installed for http and https. Both
// wrap the connection so that each read and write carries a deadline, the
// bytes read are counted, and ending the operation's context closes it. The
// file transport (a local git-upload-pack) is bounded in time only; the git://
// protocol, which go-git dials with no hook at all, is refused.
//
// It imports go-git and golang.org/x/net/proxy; gitauth supplies the
// authentication methods.
package gitremote
