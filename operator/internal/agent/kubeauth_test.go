package agent_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/stackflow-io/stackflow/operator/internal/agent"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestKubeAuthenticator checks in-cluster authentication against a real API
// server: a ServiceAccount token for the agent's audience whose subject may
// "use" workspaces/rpc is accepted; a token for another audience, or of a
// subject without that permission, is refused.
func TestKubeAuthenticator(t *testing.T) {
	cp := substrate.StartControlPlaneT(t)
	cs := kubernetes.NewForConfigOrDie(cp.Config)
	ctx := context.Background()
	ns := cp.Namespace(t)
	mk := func(obj interface{ GetName() string }, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("create %s: %v", obj.GetName(), err)
		}
	}
	for _, name := range []string{"operator", "stranger"} {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}
		_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{})
		mk(sa, err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "workspace-rpc"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"auto.pulumi.com"}, Resources: []string{"workspaces/rpc"}, Verbs: []string{"use"}, ResourceNames: []string{"ws"},
	}}}
	_, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{})
	mk(role, err)
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "operator-rpc"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "workspace-rpc"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "operator", Namespace: ns}}}
	_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{})
	mk(rb, err)

	token := func(sa, audience string) string {
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{
			Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token for %s: %v", sa, err)
		}
		return tr.Status.Token
	}
	a := agent.KubeAuthenticator{Client: cs, Audience: "stackflow-agent", Namespace: ns, Workspace: "ws"}
	cases := []struct {
		name  string
		token string
		want  codes.Code
	}{
		{"operator, agent audience", token("operator", "stackflow-agent"), codes.OK},
		{"operator, other audience", token("operator", "https://kubernetes.default.svc"), codes.Unauthenticated},
		{"stranger, agent audience", token("stranger", "stackflow-agent"), codes.PermissionDenied},
		{"garbage", "not-a-token", codes.Unauthenticated},
		{"empty", "", codes.Unauthenticated},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := status.Code(a.Authenticate(ctx, tc.token)); got != tc.want {
				t.Fatalf("Authenticate = %v, want %v", got, tc.want)
			}
		})
	}
	other := agent.KubeAuthenticator{Client: cs, Audience: "stackflow-agent", Namespace: ns, Workspace: "another"}
	if got := status.Code(other.Authenticate(ctx, token("operator", "stackflow-agent"))); got != codes.PermissionDenied {
		t.Fatalf("operator token on a workspace it may not use: %v", got)
	}
}
