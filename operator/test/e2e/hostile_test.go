package e2e

import (
	"context"
	"github.com/stackflow-io/stackflow/test/framework/logbuf"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/gitremote"
	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/hostile"
)

// TestHostileGitServersHoldNoOtherStack: a Stack author points Stacks at git
// servers that never answer, answer a byte a second, or advertise references
// for ever, over SSH and HTTPS, with two Stack workers in all. Stacks created
// afterwards, in the same namespace and in another, still deploy; the
// hostile ones say which server and which limit, within the limits; a server
// that starts answering is recovered from; and the operator stops at once,
// quietly, with listings under way. Before, the listing ran on the reconcile
// worker, and an SSH listing ignored its deadline: two such Stacks held every
// worker for as long as their servers held the connections.
func TestHostileGitServersHoldNoOtherStack(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.opts.StackWorkers = 2
	e.opts.GitListLimits = gitremote.Limits{Timeout: 20 * time.Second, IdleTimeout: 8 * time.Second, MaxBytes: 1 << 20,
		TimeoutFlag: "--git-timeout", IdleFlag: "--git-idle-timeout", BytesFlag: "--git-max-listing-bytes"}
	var logs logbuf.Buffer
	_, stop := operatortest.StartOperatorLogging(t, cp.Config, e.opts, zap.New(zap.UseDevMode(true), zap.WriteTo(&logs)))
	other := cp.Namespace(t)

	key := gitrepo.NewSSHKey(t)
	createSecret(t, e.ns, "ssh", map[string]string{"key": key.PrivateKey})
	type hostileStack struct {
		stack *pulumiv1.Stack
		srv   *hostile.Server
		want  string
	}
	var hostiles []hostileStack
	add := func(name string, srv *hostile.Server, want string) {
		spec := pulumiv1.StackSpec{Stack: name, GitSource: gitSpec(srv.URL, "main", "")}
		if srv.KnownHosts != "" {
			createSecret(t, e.ns, name+"-kh", map[string]string{"kh": srv.KnownHosts})
			kh := secretRef(name+"-kh", "kh")
			spec.GitSource.GitAuth = &pulumiv1.GitAuthConfig{SSHAuth: &pulumiv1.SSHAuth{SSHPrivateKey: secretRef("ssh", "key"), KnownHosts: &kh}}
		}
		s := newStack(e.ns, name, spec)
		if err := cp.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		hostiles = append(hostiles, hostileStack{s, srv, want})
	}
	for _, b := range hostile.Behaviours {
		want := map[hostile.Behaviour]string{hostile.Silent: "sent nothing for 8s (--git-idle-timeout)",
			hostile.Drip: "did not finish within 20s (--git-timeout)", hostile.EndlessRefs: "sent more than 1 MiB (--git-max-listing-bytes)"}[b]
		add("ssh-"+string(b), hostile.SSH(t, b), want)
		add("https-"+string(b), hostile.HTTP(t, b, true), want)
	}
	for _, h := range hostiles {
		for deadline := time.Now().Add(time.Minute); h.srv.Accepted() == 0; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the operator never connected to %s", h.stack.Name, h.srv.Addr)
			}
		}
	}

	// Ordinary Stacks, created while the hostile listings are under way, in
	// the same namespace and in another: each deploys.
	repo := gitrepo.New(t)
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})
	start := time.Now()
	var ordinary []*pulumiv1.Stack
	for _, ns := range []string{e.ns, other} {
		s := newStack(ns, "ordinary", pulumiv1.StackSpec{Stack: "ordinary-" + ns, GitSource: gitSpec(repo.URL(), "main", ""),
			Config: cfg("recordName", "ordinary-"+ns, "content", "v1")})
		if err := cp.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		ordinary = append(ordinary, s)
	}
	for _, s := range ordinary {
		waitStack(t, s, 3*time.Minute, "deployed beside the hostile Stacks", readyAt(sha))
		t.Logf("%s/%s deployed %s after it was created", s.Namespace, s.Name, time.Since(start).Round(time.Second))
	}

	// The hostile Stacks say which server ran into which limit, and retry.
	for _, h := range hostiles {
		waitStack(t, h.stack, 2*time.Minute, "unreachable, naming the server and the limit", func(s *pulumiv1.Stack) bool {
			c := condition(s, pulumiv1.ReconcilingCondition)
			return c != nil && c.Reason == pulumiv1.ReconcilingSourceUnreachableReason &&
				strings.Contains(c.Message, h.srv.Addr) && strings.Contains(c.Message, h.want)
		})
	}

	// A server that answers nothing, then starts serving the repository: the
	// Stack deploys.
	root := t.TempDir()
	late := gitrepo.NewIn(t, root, "late.git")
	lateSHA := late.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})
	served := gitrepo.NewHTTPServer(t, root)
	quiet, err := net.Listen("tcp", served.Addr)
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := quiet.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	recovering := newStack(e.ns, "recovering", pulumiv1.StackSpec{Stack: "recovering", GitSource: gitSpec(late.HTTPURL(served), "main", ""),
		Config: cfg("recordName", "recovering", "content", "v1")})
	if err := cp.Client.Create(ctx, recovering); err != nil {
		t.Fatal(err)
	}
	waitStack(t, recovering, 2*time.Minute, "unreachable while its server is silent", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.ReconcilingCondition)
		return c != nil && strings.Contains(c.Message, "sent nothing")
	})
	quiet.Close()
	mu.Lock()
	for _, c := range held {
		c.Close()
	}
	mu.Unlock()
	served.Start(t)
	waitStack(t, recovering, 3*time.Minute, "deployed once its server answers", readyAt(lateSHA))

	// Stopping with a listing under way (a new Stack on a silent server)
	// ends at once and logs no error.
	silent := hostile.SSH(t, hostile.Silent)
	createSecret(t, e.ns, "last-kh", map[string]string{"kh": silent.KnownHosts})
	kh := secretRef("last-kh", "kh")
	last := newStack(e.ns, "last", pulumiv1.StackSpec{Stack: "last", GitSource: gitSpec(silent.URL, "main", "")})
	last.Spec.GitSource.GitAuth = &pulumiv1.GitAuthConfig{SSHAuth: &pulumiv1.SSHAuth{SSHPrivateKey: secretRef("ssh", "key"), KnownHosts: &kh}}
	if err := cp.Client.Create(ctx, last); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); silent.Accepted() == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the operator never connected to the last silent server")
		}
	}
	before := logs.Len()
	stopped := make(chan time.Duration, 1)
	go func() {
		at := time.Now()
		stop()
		stopped <- time.Since(at)
	}()
	select {
	case took := <-stopped:
		t.Logf("the operator stopped %s after it was asked, a listing under way", took.Round(time.Millisecond))
	case <-time.After(2 * time.Minute):
		t.Fatal("the operator is still stopping two minutes later")
	}
	// A reconcile cut short by the stop says so at debug level ("Stopped
	// by the operator's shutdown", its request's "context canceled"): that
	// is the quiet path, not an error.
	var errs []string
	for _, line := range strings.Split(logs.From(before), "\n") {
		if strings.Contains(line, "Stopped by the operator's shutdown") {
			continue
		}
		if strings.Contains(line, "Reconciler error") || strings.Contains(line, "context canceled") {
			errs = append(errs, line)
		}
	}
	if len(errs) > 0 {
		t.Errorf("stopping logged errors:\n%s", strings.Join(errs, "\n"))
	}
}
