package gitremote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"
	"golang.org/x/net/proxy"
)

// proxyScheme is the x/net/proxy scheme whose "proxy" is an operation's
// budget: the SSH transport dials through it (ProxyOptions.URL
// "stackflow-budget://<id>").
const proxyScheme = "stackflow-budget"

// abandonAfter is how long an operation whose context ended may take to
// return before it is left behind: closing its connections ends SSH and
// HTTP operations at once, but a local git-upload-pack (file://) is only
// waited for by go-git.
const abandonAfter = 5 * time.Second

func init() {
	proxy.RegisterDialerType(proxyScheme, func(u *url.URL, _ proxy.Dialer) (proxy.Dialer, error) {
		b, ok := lookup(u.Host)
		if !ok {
			return nil, errEnded
		}
		return b, nil
	})
	// Smart HTTP: one client whose connections are made, and held to
	// their limits, by the request's budget; connections are not reused
	// across operations, whose budgets differ.
	hc := &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dialHTTP,
		TLSHandshakeTimeout: DefaultConnectTimeout,
		DisableKeepAlives:   true,
	}}
	client.InstallProtocol("http", githttp.NewClient(hc))
	client.InstallProtocol("https", githttp.NewClient(hc))
	// go-git dials git:// with no timeout and no hook to bound it.
	client.InstallProtocol("git", nil)
}

// dialHTTP dials for the HTTP transport within the request's budget (a
// request made outside an operation gets one of its own, with the default
// limits).
func dialHTTP(ctx context.Context, network, addr string) (net.Conn, error) {
	b := fromContext(ctx)
	if b == nil {
		b = newBudget(addr, Limits{}, time.Time{})
	}
	return b.DialContext(ctx, network, addr)
}

// ErrUnsupportedScheme: the URL's scheme is not one this package can bound.
var ErrUnsupportedScheme = errors.New("unsupported git URL scheme")

// ErrInvalidURL: the repository URL does not parse.
var ErrInvalidURL = errors.New("invalid git URL")

// endpoint parses a repository URL (scheme://…, scp-like user@host:path or
// a local path) and refuses the schemes that cannot be bounded. Errors never
// repeat the URL (its user info may be a credential).
func endpoint(raw string) (*transport.Endpoint, error) {
	ep, err := transport.NewEndpoint(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: give https://host/path, ssh://[user@]host[:port]/path, user@host:path or file:///path", ErrInvalidURL)
	}
	switch ep.Protocol {
	case "http", "https", "ssh", "file":
		return ep, nil
	case "git":
		return nil, fmt.Errorf("%w: git:// is unauthenticated and unencrypted; use https:// or ssh://", ErrUnsupportedScheme)
	}
	return nil, fmt.Errorf("%w %q: use https://, ssh:// or file://", ErrUnsupportedScheme, ep.Protocol)
}

// Host is the server a repository URL names, as host:port (the protocol's
// default port when none is given), without user info: what messages about
// the server say. A local repository is "local".
func Host(raw string) string {
	ep, err := transport.NewEndpoint(raw)
	if err != nil {
		return "(invalid URL)"
	}
	if ep.Protocol == "file" {
		return "local"
	}
	port := ep.Port
	if port == 0 {
		port = map[string]int{"http": 80, "https": 443, "ssh": 22}[ep.Protocol]
	}
	return net.JoinHostPort(strings.Trim(ep.Host, "[]"), strconv.Itoa(port))
}

// run runs op within l: op gets a context that ends at l.Timeout and the
// proxy options its SSH connections must use; its result is explained by
// the limit a server crossed, if one did.
func run(ctx context.Context, raw string, l Limits, op func(ctx context.Context, p transport.ProxyOptions) error) error {
	ep, err := endpoint(raw)
	if err != nil {
		return err
	}
	own := false
	if l.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.Timeout)
		defer cancel()
		own = true
	}
	deadline, _ := ctx.Deadline()
	b := newBudget(Host(raw), l, deadline)
	id, unregister := register(b)
	defer unregister()
	defer b.close()
	stop := context.AfterFunc(ctx, b.close)
	defer stop()
	ctx = context.WithValue(ctx, budgetKey{}, b)
	var p transport.ProxyOptions
	if ep.Protocol == "ssh" {
		p.URL = proxyScheme + "://" + id
	}

	done := make(chan error, 1)
	go func() { done <- op(ctx, p) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		select {
		case err = <-done:
		case <-time.After(abandonAfter):
			err = ctx.Err()
		}
	}
	if err == nil {
		return nil
	}
	if e := b.tripped(); e != nil {
		return e
	}
	// The deadline is looked at by the clock too: a connection's deadline
	// (the same instant) may end the operation before the context's timer
	// has marked it done.
	expired := errors.Is(ctx.Err(), context.DeadlineExceeded) || b.pastDeadline()
	switch {
	case expired && own:
		return b.trip(LimitTime)
	case expired:
		return fmt.Errorf("git server %s: %w", b.host, context.DeadlineExceeded)
	case ctx.Err() != nil:
		// The caller's context ended: say so rather than what the closed
		// connections made go-git say.
		return fmt.Errorf("git server %s: %w", b.host, context.Cause(ctx))
	}
	return err
}

// List lists the references of the repository at url (git ls-remote),
// within l.
func List(ctx context.Context, url string, auth transport.AuthMethod, l Limits) ([]*plumbing.Reference, error) {
	var refs []*plumbing.Reference
	err := run(ctx, url, l, func(ctx context.Context, p transport.ProxyOptions) error {
		remote := git.NewRemote(memory.NewStorage(), &gitconfig.RemoteConfig{Name: "origin", URLs: []string{url}})
		var err error
		refs, err = remote.ListContext(ctx, &git.ListOptions{Auth: auth, ProxyOptions: p})
		return err
	})
	return refs, err
}

// Fetch fetches into repo as opts say, within l. opts.ProxyOptions is
// replaced (the operation's connections are this package's).
func Fetch(ctx context.Context, repo *git.Repository, url string, opts *git.FetchOptions, l Limits) error {
	return run(ctx, url, l, func(ctx context.Context, p transport.ProxyOptions) error {
		o := *opts
		o.ProxyOptions = p
		return repo.FetchContext(ctx, &o)
	})
}
