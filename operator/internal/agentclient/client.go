// Package agentclient connects the operator to workspace agents: one pooled
// gRPC connection per workspace address and token, authenticated with the
// workspace's bearer token.
//
// It imports the generated agent API, gRPC and gitauth (to encode git
// credentials for a Checkout) only.
package agentclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

// Pool caches connections to agents.
type Pool struct {
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
	// tokens, when set, authenticates every call (the operator's own
	// ServiceAccount token) instead of a per-workspace token.
	tokens TokenSource
	// dial, when set, connects to agents instead of the network.
	dial func(ctx context.Context, address string) (net.Conn, error)
}

// WithDialer makes the pool connect to every agent address through dial,
// given the address as the Workspace reports it (tests serve an in-process
// agent over google.golang.org/grpc/test/bufconn). It returns p.
func (p *Pool) WithDialer(dial func(ctx context.Context, address string) (net.Conn, error)) *Pool {
	p.dial = dial
	return p
}

// NewPool returns an empty pool authenticating with each workspace's own
// token (Get's token argument).
func NewPool() *Pool { return &Pool{conns: map[string]*grpc.ClientConn{}} }

// NewSourcePool returns an empty pool authenticating every call with a token
// from src, read per call (so a rotated token is used as soon as it is
// there); Get's token argument is ignored.
func NewSourcePool(src TokenSource) *Pool {
	return &Pool{conns: map[string]*grpc.ClientConn{}, tokens: src}
}

// WorkspaceTokens reports whether callers must pass each workspace's own
// token to Get (false: the pool has its own token source).
func (p *Pool) WorkspaceTokens() bool { return p.tokens == nil }

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false: agents are reached over the cluster
// network or loopback; the token authenticates the operator.
func (bearer) RequireTransportSecurity() bool { return false }

// Connection timeouts. Every unary call carries its caller's deadline; the
// long-lived WatchOperation streams have none, so keepalive pings find a dead
// agent (or a broken network path) within KeepaliveTime + KeepaliveTimeout.
// Agents accept pings this often (agent.KeepaliveMinTime).
const (
	ConnectTimeout   = 10 * time.Second
	KeepaliveTime    = 30 * time.Second
	KeepaliveTimeout = 10 * time.Second
)

// sourced authenticates each call with a token read from a TokenSource.
type sourced struct{ src TokenSource }

func (s sourced) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	tok, err := s.src.Token()
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

func (sourced) RequireTransportSecurity() bool { return false }

// dialOptions are the options of every agent connection.
func dialOptions(creds credentials.PerRPCCredentials) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: ConnectTimeout}),
		// Pings only while calls are in flight: an idle pooled connection
		// costs the agent nothing.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout}),
	}
}

// Get returns a client for the agent at address, authenticating with token
// (or, in a NewSourcePool, with the pool's token source).
func (p *Pool) Get(address, token string) (agentv1.AgentClient, error) {
	var key string
	var creds credentials.PerRPCCredentials
	if p.tokens != nil {
		key, creds = address+"/source", sourced{p.tokens}
	} else {
		sum := sha256.Sum256([]byte(token))
		key, creds = address+"/"+hex.EncodeToString(sum[:8]), bearer(token)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if cc, ok := p.conns[key]; ok {
		return agentv1.NewAgentClient(cc), nil
	}
	target, opts := address, dialOptions(creds)
	if p.dial != nil {
		// passthrough: the dialer gets the address itself, unresolved.
		target, opts = "passthrough:///"+address, append(opts, grpc.WithContextDialer(p.dial))
	}
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to agent at %s: %w", address, err)
	}
	p.conns[key] = cc
	return agentv1.NewAgentClient(cc), nil
}

// Forget closes the connections to an address (a replaced workspace).
func (p *Pool) Forget(address string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, cc := range p.conns {
		if len(k) > len(address) && k[:len(address)+1] == address+"/" {
			cc.Close()
			delete(p.conns, k)
		}
	}
}

// Close closes every connection.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, cc := range p.conns {
		cc.Close()
		delete(p.conns, k)
	}
}
