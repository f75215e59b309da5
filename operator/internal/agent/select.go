package agent

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

// selectTimeout bounds the pulumi commands of one selection (stack select or
// init, config, environments), which run apart from the request that asked
// for them.
const selectTimeout = 10 * time.Minute

// selection is a SelectStack in progress for one stack.
type selection struct {
	// digest is the request's (selectDigest).
	digest string
	done   chan struct{}
	// err is the result, set before done is closed.
	err error
}

// SelectStack selects or creates a stack and replaces its configuration.
//
// The pulumi commands run apart from the request: a caller that goes away (an
// operator killed or restarted, a call timing out) does not interrupt them,
// since a `pulumi stack init` interrupted half way can leave the stack's lock
// in the backend without the stack, which every later init then fails on.
// The selection goes on, and its result answers the next request. One
// selection of a stack runs at a time: the same request joins the one in
// progress, another waits for it.
func (s *Server) SelectStack(ctx context.Context, req *agentv1.SelectStackRequest) (*agentv1.SelectStackResponse, error) {
	name := req.GetStackName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "stack name is required")
	}
	cfg, secrets, err := resolveConfig(req.GetConfig())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	digest := selectDigest(req)
	ok := &agentv1.SelectStackResponse{StackName: name}
	for {
		s.mu.Lock()
		if s.selected[name] == digest {
			// This very configuration is applied already: an operator that
			// restarted (and so forgot what it applied) asks again, maybe
			// while an update runs. Nothing to do, and nothing to wait for.
			s.mu.Unlock()
			return ok, nil
		}
		if sel := s.selections[name]; sel != nil {
			s.mu.Unlock()
			if err := waitSelection(ctx, sel); err != nil {
				return nil, err
			}
			if sel.digest == digest {
				return resultOf(ok, sel.err)
			}
			continue // the other configuration is applied: now this one
		}
		if id, running := s.busy[name]; running {
			s.mu.Unlock()
			return nil, status.Errorf(codes.FailedPrecondition, "stack %s is busy with update %s; configuration is applied after it", name, id)
		}
		if err := s.checkingOut(); err != nil {
			s.mu.Unlock()
			return nil, err
		}
		sel := &selection{digest: digest, done: make(chan struct{})}
		s.selections[name] = sel
		s.selecting++
		prog := s.program
		s.mu.Unlock()
		go s.runSelection(sel, req, prog, cfg, secrets)
		if err := waitSelection(ctx, sel); err != nil {
			return nil, err
		}
		return resultOf(ok, sel.err)
	}
}

// waitSelection waits for sel to end, or for the caller to go away (then the
// selection goes on without it).
func waitSelection(ctx context.Context, sel *selection) error {
	select {
	case <-sel.done:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

func resultOf(ok *agentv1.SelectStackResponse, err error) (*agentv1.SelectStackResponse, error) {
	if err != nil {
		return nil, err
	}
	return ok, nil
}

// runSelection runs a selection to its end under its own deadline and
// records its result.
func (s *Server) runSelection(sel *selection, req *agentv1.SelectStackRequest, prog program, cfg []configValue, secrets []string) {
	ctx, cancel := context.WithTimeout(context.Background(), selectTimeout)
	defer cancel()
	err := s.selectStack(ctx, req, prog, cfg, secrets)
	s.mu.Lock()
	if err == nil {
		s.selected[req.GetStackName()] = sel.digest
	}
	delete(s.selections, req.GetStackName())
	s.selecting--
	sel.err = err
	close(sel.done)
	s.mu.Unlock()
	if err != nil {
		s.log.Info("Selecting the stack failed", "stack", req.GetStackName(), "message", status.Convert(err).Message())
		return
	}
	s.log.Info("Selected stack", "stack", req.GetStackName(), "configKeys", len(cfg))
}

// selectStack selects (or creates) the stack in prog's workspace and applies
// its configuration and environments.
func (s *Server) selectStack(ctx context.Context, req *agentv1.SelectStackRequest, prog program, cfg []configValue, secrets []string) error {
	name := req.GetStackName()
	// The stack's secret configuration replaces the one it had (kept as the
	// previous set), so selecting a stack again and again never grows the
	// redactor.
	s.redact.replace(configScope(name), secrets...)

	var stack auto.Stack
	var err error
	if req.GetCreate() {
		ws := prog.ws
		if sp := req.GetSecretsProvider(); sp != "" {
			// The secrets provider is a property of the workspace used to
			// create the stack: the same program directory, configured with it.
			ws, err = auto.NewLocalWorkspace(ctx, append(prog.wsOpts, auto.SecretsProvider(sp))...)
			if err != nil {
				return status.Errorf(codes.Internal, "open workspace with secrets provider: %s", s.redact.summarize(err))
			}
		}
		stack, err = s.upsertStack(ctx, name, ws)
	} else {
		stack, err = auto.SelectStack(ctx, name, prog.ws)
	}
	if err != nil {
		if auto.IsSelectStack404Error(err) {
			return status.Errorf(codes.NotFound, "stack %s does not exist and create is off", name)
		}
		msg := fmt.Sprintf("select stack %s: %s", name, s.redact.summarize(err))
		var left errLeftLock
		if errors.As(err, &left) {
			msg += "; " + s.redact.redact(left.Error())
		} else if hs := lockHolders(err.Error()); len(hs) > 0 {
			// Who holds the lock: the CLI says it below its error line.
			var held []string
			for _, h := range hs {
				held = append(held, h.String())
			}
			msg += " (" + s.redact.redact(strings.Join(held, "; ")) + ")"
		}
		return status.Error(codes.Unavailable, msg)
	}
	if err := s.applyConfig(ctx, stack, cfg); err != nil {
		return status.Errorf(codes.InvalidArgument, "set configuration of %s: %s", name, s.redact.summarize(err))
	}
	if envs := req.GetEnvironment(); len(envs) > 0 {
		if err := stack.AddEnvironments(ctx, envs...); err != nil {
			return status.Errorf(codes.InvalidArgument, "add environments %v to %s: %s", envs, name, s.redact.summarize(err))
		}
	}
	return nil
}

// upsertStack selects the stack, creating it when it does not exist. A
// `pulumi stack init` killed half way (the agent killed, or its deadline
// passed) can leave the stack's lock in the backend and no stack; `pulumi
// cancel` cannot remove the lock of a stack that does not exist, so every
// later init would fail on it. When every holder of that lock is a pulumi
// process of this workspace that is gone, and the lock is a file of a file://
// backend, the lock is removed and the stack created, once; for other
// backends the error says which object to delete.
func (s *Server) upsertStack(ctx context.Context, name string, ws auto.Workspace) (auto.Stack, error) {
	stack, err := auto.UpsertStack(ctx, name, ws)
	if err == nil || !auto.IsConcurrentUpdateError(err) {
		return stack, err
	}
	stale, holders := staleLock(err.Error(), s.hostname, s.alive)
	if !stale {
		return stack, err // a live process holds it: a retry will do
	}
	if rerr := removeLockFiles(holders); rerr != nil {
		return stack, errLeftLock{err: err, holders: holders, why: rerr}
	}
	s.log.Info("Removed a stale lock left by a killed stack creation", "stack", name, "pid", holders[0].PID)
	return auto.UpsertStack(ctx, name, ws)
}

// errLeftLock: a killed run left the lock of a stack that does not exist, and
// the agent could not remove it.
type errLeftLock struct {
	err     error
	holders []lockHolder
	why     error
}

func (e errLeftLock) Error() string {
	var urls []string
	for _, h := range e.holders {
		urls = append(urls, h.URL)
	}
	return fmt.Sprintf("the lock was left by a killed `pulumi stack init` (pid %d of this workspace) before the stack was created, "+
		"and `pulumi cancel` cannot remove the lock of a stack that does not exist: delete %s from the backend (%v)",
		e.holders[0].PID, strings.Join(urls, ", "), e.why)
}

func (e errLeftLock) Unwrap() error { return e.err }

// removeLockFiles deletes the lock files of holders, which must be files of a
// file:// backend (under its .pulumi/locks directory).
func removeLockFiles(holders []lockHolder) error {
	for _, h := range holders {
		u, err := url.Parse(h.URL)
		if err != nil || u.Scheme != "file" {
			return fmt.Errorf("the agent removes stale locks of file:// backends only")
		}
		// Cleaned first: a project or stack name of ".." must not lead out
		// of the lock directory.
		p := filepath.Clean(u.Path)
		if !strings.Contains(p, "/.pulumi/locks/") || !strings.HasSuffix(p, ".json") {
			return fmt.Errorf("the agent removes stale locks of file:// backends only")
		}
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}
