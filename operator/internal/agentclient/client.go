// Package agentclient connects the operator to workspace agents: one pooled
// gRPC connection per workspace address and token, authenticated with the
// workspace's bearer token.
//
// It imports the generated agent API and gRPC only.
package agentclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

// Pool caches connections to agents.
type Pool struct {
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewPool returns an empty pool.
func NewPool() *Pool { return &Pool{conns: map[string]*grpc.ClientConn{}} }

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

// dialOptions are the options of every agent connection.
func dialOptions(token string) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer(token)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: ConnectTimeout}),
		// Pings only while calls are in flight: an idle pooled connection
		// costs the agent nothing.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout}),
	}
}

// Get returns a client for the agent at address, authenticating with token.
func (p *Pool) Get(address, token string) (agentv1.AgentClient, error) {
	sum := sha256.Sum256([]byte(token))
	key := address + "/" + hex.EncodeToString(sum[:8])
	p.mu.Lock()
	defer p.mu.Unlock()
	if cc, ok := p.conns[key]; ok {
		return agentv1.NewAgentClient(cc), nil
	}
	cc, err := grpc.NewClient(address, dialOptions(token)...)
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
