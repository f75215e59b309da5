package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

// checkoutStopWait is how long a Checkout of another revision waits for the
// one it cancelled to end.
const checkoutStopWait = 10 * time.Second

// checkout is a Checkout request and its progress.
type checkout struct {
	cancel context.CancelFunc
	done   chan struct{}
	// status is guarded by the server's mu.
	status *agentv1.CheckoutStatus
}

func (c *checkout) running() bool {
	return c != nil && c.status.GetState() == agentv1.CheckoutState_CHECKOUT_STATE_RUNNING
}

// Checkout moves the workspace to another revision of its source, in the
// background (see the RPC's documentation in agent.proto).
func (s *Server) Checkout(_ context.Context, req *agentv1.CheckoutRequest) (*agentv1.CheckoutStatus, error) {
	src, err := s.checkoutSource(req)
	if err != nil {
		return nil, err
	}
	if req.GetGitCredentials() != nil {
		// Redacted before anything can print them. The set replaces the
		// previous request's (kept as the previous one), so rotating a
		// credential again and again does not grow the redactor.
		s.redact.replace(checkoutCredentialsScope, src.GitAuth.Secrets()...)
	}
	ref := sourceRef(src)
	for {
		s.mu.Lock()
		c := s.checkout
		switch {
		case c.running() && c.status.GetSourceRef() == ref:
			st := proto.Clone(c.status).(*agentv1.CheckoutStatus)
			s.mu.Unlock()
			return st, nil
		case c.running():
			// Another revision is wanted now: stop that checkout, then
			// look again (another request may have come meanwhile). Its
			// connections close when it is cancelled (gitremote) and its
			// install is killed, so it ends at once; should it not, the
			// caller is told to ask again rather than held.
			stopping := c.status.GetSourceRef()
			s.mu.Unlock()
			c.cancel()
			select {
			case <-c.done:
			case <-time.After(checkoutStopWait):
				return nil, status.Errorf(codes.Unavailable, "the checkout of %s is still stopping: ask again", stopping)
			}
			continue
		case ref == s.program.sourceRef:
			st := &agentv1.CheckoutStatus{SourceRef: ref, State: agentv1.CheckoutState_CHECKOUT_STATE_SUCCEEDED,
				Revision: s.program.revision, Message: "revision " + s.program.revision + " is checked out"}
			s.mu.Unlock()
			return st, nil
		}
		if err := s.idle(); err != nil {
			s.mu.Unlock()
			return nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		c = &checkout{cancel: cancel, done: make(chan struct{}), status: &agentv1.CheckoutStatus{
			SourceRef: ref, State: agentv1.CheckoutState_CHECKOUT_STATE_RUNNING, Message: "checking out " + ref,
			StartTimeUnixNano: s.now().UnixNano(),
		}}
		s.checkout = c
		s.checkoutDirs++
		dir := filepath.Join(s.workDir, fmt.Sprintf("source.%d", s.checkoutDirs))
		st := proto.Clone(c.status).(*agentv1.CheckoutStatus)
		s.mu.Unlock()
		go s.runCheckout(ctx, c, src, dir)
		return st, nil
	}
}

// checkoutSource is the agent's source at the requested revision: a git ref
// (with the request's credentials, when it carries some) for a git source, an
// artifact for an artifact source. The repository and program directory stay
// those the agent started with.
//
// Credentials come with each request rather than from the agent's
// environment, which holds the values of the Secrets when the agent started:
// the operator reads the Workspace's Secrets just before it asks, so a
// rotated token or key reaches the very next fetch, and the agent (its
// stacks, runs and process) lives on. Restarting the agent (rolling the pod)
// on a credential change would instead cut the updates running in it and
// fetch and install the program again.
func (s *Server) checkoutSource(req *agentv1.CheckoutRequest) (Source, error) {
	src := s.source
	artifact := req.GetArtifactUrl() != "" || req.GetArtifactDigest() != ""
	switch {
	case src.GitURL != "":
		if artifact || req.GetGitRef() == "" {
			return Source{}, status.Error(codes.InvalidArgument, "this workspace's source is a git repository: give git_ref (a commit SHA, branch or tag) only")
		}
		src.GitRef = req.GetGitRef()
		if c := req.GetGitCredentials(); c != nil {
			src.GitAuth = credentialsFromRequest(c)
		}
	case src.ArtifactURL != "":
		if req.GetGitRef() != "" || req.GetArtifactUrl() == "" || !strings.HasPrefix(req.GetArtifactDigest(), "sha256:") || req.GetGitCredentials() != nil {
			return Source{}, status.Error(codes.InvalidArgument, "this workspace's source is an artifact: give artifact_url and artifact_digest (sha256:<hex>) only")
		}
		src.ArtifactURL, src.ArtifactDigest = req.GetArtifactUrl(), req.GetArtifactDigest()
	default:
		return Source{}, status.Error(codes.FailedPrecondition, "this workspace's program is a local directory or baked into its image: it has no revisions to check out")
	}
	return src, nil
}

// credentialsFromRequest decodes a Checkout's credentials (the operator's
// agentclient.GitCredentials encodes them). They are used as given: like the
// environment's (gitauth.FromEnv), they are checked when the fetch uses them,
// and an unusable one fails it as SourceUnavailable, naming the field only.
func credentialsFromRequest(c *agentv1.GitCredentials) gitauth.Credentials {
	out := gitauth.Credentials{Token: c.GetToken(), Username: c.GetUsername(), Password: c.GetPassword(),
		SSHPrivateKey: c.GetSshPrivateKey(), KnownHosts: c.GetKnownHosts()}
	if app := c.GetGithubApp(); app != nil {
		out.GitHubApp = &gitauth.GitHubApp{AppID: app.GetAppId(), InstallationID: app.GetInstallationId(),
			PrivateKey: app.GetPrivateKey(), APIURL: app.GetApiUrl()}
	}
	return out
}

// idle is nil when no operation or SelectStack runs (the caller holds mu).
func (s *Server) idle() error {
	for stack, id := range s.busy {
		return status.Errorf(codes.FailedPrecondition, "update %s is running on stack %s: the checkout waits for it to end", id, stack)
	}
	if s.selecting > 0 {
		return status.Error(codes.FailedPrecondition, "a stack is being configured: check out after it")
	}
	return nil
}

// checkingOut refuses work while a checkout runs (the caller holds mu).
func (s *Server) checkingOut() error {
	if s.checkout.running() {
		return status.Errorf(codes.FailedPrecondition, "the workspace is checking out %s", s.checkout.status.GetSourceRef())
	}
	return nil
}

// runCheckout fetches and installs src into dir, then makes it the
// workspace's program: the stacks must be selected again, since their
// configuration belonged to the previous checkout. A failure, or a
// cancellation, leaves the previous program in place.
func (s *Server) runCheckout(ctx context.Context, c *checkout, src Source, dir string) {
	defer close(c.done)
	defer c.cancel()
	ref := sourceRef(src)
	log := s.log.WithValues("ref", ref)
	log.Info("Checking out")
	prog, err := s.prepare(ctx, log, src, dir)
	s.mu.Lock()
	st := c.status
	st.EndTimeUnixNano = s.now().UnixNano()
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		st.State, st.Reason = agentv1.CheckoutState_CHECKOUT_STATE_FAILED, FailureReason(err)
		if errors.Is(err, context.Canceled) {
			st.Message = "checkout of " + ref + " canceled"
		} else {
			st.Message = s.redact.redact(strings.Join(strings.Fields(err.Error()), " "))
		}
		s.mu.Unlock()
		log.Info("Checkout failed", "reason", st.Reason, "message", st.Message)
		_ = os.RemoveAll(dir)
		return
	}
	old := s.program
	s.program = prog
	s.checkouts++
	clear(s.selected)
	clear(s.configKeys)
	clear(s.stacks)
	st.State, st.Revision = agentv1.CheckoutState_CHECKOUT_STATE_SUCCEEDED, prog.revision
	st.Message = "revision " + prog.revision + " is checked out"
	s.mu.Unlock()
	log.Info("Checked out", "revision", prog.revision, "dir", dir)
	if old.dir != "" && old.dir != dir {
		_ = os.RemoveAll(old.dir)
	}
}

// clearSources removes the checkouts under workDir.
func clearSources(workDir string) error {
	dirs, err := filepath.Glob(filepath.Join(workDir, "source.*"))
	if err != nil {
		return err
	}
	for _, d := range append(dirs, filepath.Join(workDir, "source")) {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("clear source directory: %w", err)
		}
	}
	return nil
}
