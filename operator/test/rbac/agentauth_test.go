package rbac

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/stackflow-io/stackflow/operator/internal/agent"
	"github.com/stackflow-io/stackflow/operator/internal/agentclient"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	agentv1 "github.com/stackflow-io/stackflow/operator/proto/agent/v1"
)

// TestAgentKubeAuth runs --workspace-auth=kube's two halves against the real
// API server and the generated role: the operator's pool presents its
// ServiceAccount token from a file (as the projected volume gives it), and an
// agent — the agent's own authenticator and interceptors, identified as a
// workspace ServiceAccount bound to system:auth-delegator, as SECURITY.md
// asks — verifies it with a TokenReview and a SubjectAccessReview.
//
// The agent serves no methods, so a call that passes authentication answers
// Unimplemented; a refused one Unauthenticated or PermissionDenied.
func TestAgentKubeAuth(t *testing.T) {
	cp := controlPlane(t)
	ctx := context.Background()
	opNS, ns := cp.Namespace(t), cp.Namespace(t)
	operatorIdentity(t, opNS) // ServiceAccount stackflow-operator with the generated ClusterRole
	cs := kubernetes.NewForConfigOrDie(cp.Config)
	for _, sa := range []struct{ ns, name string }{{ns, "workspace"}, {ns, "workspace-unbound"}, {opNS, "stranger"}} {
		if _, err := cs.CoreV1().ServiceAccounts(sa.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa.name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "workspace-auth-delegator-" + ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "workspace", Namespace: ns}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})

	token := func(ns, sa, audience string) string {
		t.Helper()
		var spec authnv1.TokenRequestSpec // no audience: the API server's own
		if audience != "" {
			spec.Audiences = []string{audience}
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token for %s/%s: %v", ns, sa, err)
		}
		return tr.Status.Token
	}
	// agentAs serves an agent of Workspace ns/web whose API client is the
	// ServiceAccount sa (its own token, as in the pod), returning its address.
	agentAs := func(sa string) string {
		t.Helper()
		cfg := rest.AnonymousClientConfig(cp.Config)
		cfg.BearerToken = token(ns, sa, "") // the API server's audience, as the pod's own token
		auth := agent.KubeAuthenticator{Client: kubernetes.NewForConfigOrDie(cfg), Audience: pod.DefaultKubeAudience, Namespace: ns, Workspace: "web"}
		gs := grpc.NewServer(grpc.ChainUnaryInterceptor(agent.UnaryAuth(auth)), grpc.ChainStreamInterceptor(agent.StreamAuth(auth)))
		agentv1.RegisterAgentServer(gs, agentv1.UnimplementedAgentServer{})
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = gs.Serve(lis) }()
		t.Cleanup(gs.Stop)
		return lis.Addr().String()
	}
	delegated, undelegated := agentAs("workspace"), agentAs("workspace-unbound")

	tokenFile := filepath.Join(t.TempDir(), "token")
	write := func(tok string) {
		t.Helper()
		if err := os.WriteFile(tokenFile, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Refresh 0 would be the default minute; a nanosecond reads the file at
	// every call, so each case sees the token just written.
	pool := agentclient.NewSourcePool(&agentclient.FileToken{Path: tokenFile, Refresh: time.Nanosecond})
	t.Cleanup(pool.Close)
	if pool.WorkspaceTokens() {
		t.Fatal("a source pool asks for workspace tokens")
	}
	call := func(addr string) error {
		c, err := pool.Get(addr, "")
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err = c.Info(cctx, &agentv1.InfoRequest{})
		return err
	}
	cases := []struct {
		name  string
		token string
		agent string
		want  codes.Code
	}{
		{"the operator's token", token(opNS, "stackflow-operator", pod.DefaultKubeAudience), delegated, codes.Unimplemented},
		{"rotated: a new token of the operator", token(opNS, "stackflow-operator", pod.DefaultKubeAudience), delegated, codes.Unimplemented},
		{"a ServiceAccount without workspaces/rpc use", token(opNS, "stranger", pod.DefaultKubeAudience), delegated, codes.PermissionDenied},
		{"the operator's token for the API server's audience", token(opNS, "stackflow-operator", ""), delegated, codes.Unauthenticated},
		{"not a token", "not-a-token", delegated, codes.Unauthenticated},
		// Without system:auth-delegator the agent cannot review tokens:
		// every call fails, saying why.
		{"an agent without system:auth-delegator", token(opNS, "stackflow-operator", pod.DefaultKubeAudience), undelegated, codes.Unavailable},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			write(tt.token)
			err := call(tt.agent)
			if got := status.Code(err); got != tt.want {
				t.Fatalf("call: %v (code %s), want %s", err, got, tt.want)
			}
			if tt.want == codes.Unavailable && !strings.Contains(status.Convert(err).Message(), "token review") {
				t.Errorf("message %q does not say the token review failed", status.Convert(err).Message())
			}
			if strings.Contains(status.Convert(err).Message(), tt.token) {
				t.Errorf("the agent's answer carries the token")
			}
		})
	}
}
