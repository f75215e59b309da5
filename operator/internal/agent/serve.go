package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

// KeepaliveMinTime is the shortest interval between a client's keepalive
// pings the agent accepts (the operator pings every 30 s while a call is in
// flight; gRPC's default of 5 minutes would make the agent drop such a
// connection). The agent pings an idle connection after two minutes itself and
// closes it when no answer comes within 20 s.
const KeepaliveMinTime = 10 * time.Second

// ServeOptions configure the listener.
type ServeOptions struct {
	// Listen is the TCP address to serve on (":50051", "127.0.0.1:0").
	Listen string
	// AddressFile, when set, receives the bound address once serving, for a
	// parent process that asked for port 0.
	AddressFile string
	// Auth authenticates callers; required.
	Auth Authenticator
}

// Serve prepares the workspace (fetches the program, installs its
// dependencies), then serves the agent API and the gRPC health service until ctx
// ends. Nothing listens while preparing, so readiness probes fail until the
// workspace can run operations; a preparation failure is returned (the process
// exits, and the workspace reports it).
func Serve(ctx context.Context, log logr.Logger, opts Options, so ServeOptions) error {
	if so.Auth == nil {
		return errors.New("no authenticator: refusing to serve an open agent")
	}
	hs := health.NewServer()
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(UnaryAuth(so.Auth)), grpc.ChainStreamInterceptor(StreamAuth(so.Auth)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveMinTime}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Minute, Timeout: 20 * time.Second}))
	healthpb.RegisterHealthServer(gs, hs)
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)

	srv, err := New(ctx, log, opts)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", so.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", so.Listen, err)
	}
	agentv1.RegisterAgentServer(gs, srv)
	if so.AddressFile != "" {
		tmp := so.AddressFile + ".tmp"
		if err := os.MkdirAll(filepath.Dir(tmp), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(tmp, []byte(lis.Addr().String()), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, so.AddressFile); err != nil {
			return err
		}
	}
	log.Info("Serving the agent API", "address", lis.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	select {
	case <-ctx.Done():
		hs.Shutdown()
		srv.cancelAll()
		gs.GracefulStop()
		return nil
	case err := <-errc:
		return err
	}
}

// cancelAll cancels running operations (and a checkout) and waits for them, so a stopping agent
// leaves no pulumi process behind holding a lock.
func (s *Server) cancelAll() {
	s.mu.Lock()
	runs := make([]*run, 0, len(s.runs))
	for _, r := range s.runs {
		runs = append(runs, r)
	}
	c := s.checkout
	s.mu.Unlock()
	if c != nil {
		c.cancel()
		<-c.done
	}
	for _, r := range runs {
		r.cancel()
		<-r.done
	}
}
