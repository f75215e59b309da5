// Package hostproxy is an HTTP forward proxy on loopback that serves named
// hosts from loopback addresses: a stand-in for the cluster DNS and the
// corporate proxy a test cannot have. A process given it as http_proxy reaches
// http://github.stackflow.test/… or http://stackflow-analysis.stackflow-system.svc:8080
// as written in the manifests, while the servers behind those names listen on
// 127.0.0.1.
//
// It exists because some clients choose their behaviour by host name: Kargo's
// git providers pick GitHub for a host containing "github", and Go resolves
// no name but "localhost" to loopback without /etc/hosts. Only plain HTTP is
// proxied (no CONNECT): a request for a host it does not know is answered 502
// and never leaves the machine.
//
// It imports only the standard library.
package hostproxy

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"
)

// Proxy is a running forward proxy.
type Proxy struct {
	// URL is the proxy's address as http_proxy takes it (http://127.0.0.1:port).
	URL string

	mu     sync.RWMutex
	routes map[string]string // host[:port] as requested → loopback host:port
	srv    *http.Server
}

// Start listens on a loopback port and serves until Close.
func Start() (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{URL: "http://" + l.Addr().String(), routes: map[string]string{}}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(l) }()
	return p, nil
}

// Route serves host (a name, with its port when not 80, as it appears in
// URLs) from addr, a loopback host:port.
func (p *Proxy) Route(host, addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.routes[canonical(host)] = addr
}

// Close stops the proxy.
func (p *Proxy) Close() error { return p.srv.Close() }

// ServeHTTP forwards an absolute-form request for a routed host to its
// address, keeping the Host header the client sent.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect || r.URL.Scheme != "http" || r.URL.Host == "" {
		http.Error(w, "hostproxy serves plain-HTTP requests for its routed hosts only", http.StatusBadGateway)
		return
	}
	p.mu.RLock()
	addr, ok := p.routes[canonical(r.URL.Host)]
	p.mu.RUnlock()
	if !ok {
		http.Error(w, fmt.Sprintf("hostproxy: no route for host %q", r.URL.Host), http.StatusBadGateway)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = addr
			pr.Out.Host = pr.In.Host
		},
		// Long polls and streamed git packs pass through as they come.
		FlushInterval: -1,
	}
	rp.ServeHTTP(w, r)
}

// canonical drops the default port, so that "host" and "host:80" are one route.
func canonical(host string) string {
	return strings.TrimSuffix(strings.ToLower(host), ":80")
}
