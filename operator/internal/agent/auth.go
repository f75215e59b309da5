package agent

import (
	"context"
	"crypto/subtle"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Authenticator decides whether a caller's bearer token may use the agent.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) error
}

// TokenAuthenticator accepts one shared random token (the local runtime, and the
// pod runtime's default).
type TokenAuthenticator struct{ Token string }

// Authenticate compares in constant time.
func (a TokenAuthenticator) Authenticate(_ context.Context, token string) error {
	if a.Token == "" || subtle.ConstantTimeCompare([]byte(a.Token), []byte(token)) != 1 {
		return status.Error(codes.Unauthenticated, "invalid bearer token")
	}
	return nil
}

// KubeRequestTimeout bounds each TokenReview and SubjectAccessReview request
// of the agent's API server client.
const KubeRequestTimeout = 15 * time.Second

// KubeAuthenticator accepts Kubernetes ServiceAccount tokens issued for Audience,
// verified with a TokenReview, whose subject may use the workspace: a
// SubjectAccessReview for verb "use" on auto.pulumi.com workspaces/rpc named
// Workspace in Namespace.
type KubeAuthenticator struct {
	Client    kubernetes.Interface
	Audience  string
	Namespace string
	Workspace string
}

// Authenticate verifies the token and the caller's permission.
func (a KubeAuthenticator) Authenticate(ctx context.Context, token string) error {
	if token == "" {
		return status.Error(codes.Unauthenticated, "no bearer token")
	}
	tr, err := a.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{a.Audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return status.Errorf(codes.Unavailable, "token review: %v", err)
	}
	if !tr.Status.Authenticated {
		return status.Error(codes.Unauthenticated, "token not authenticated for this workspace's audience")
	}
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range tr.Status.User.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := a.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{
		Spec: authzv1.SubjectAccessReviewSpec{
			User: tr.Status.User.Username, UID: tr.Status.User.UID, Groups: tr.Status.User.Groups, Extra: extra,
			ResourceAttributes: &authzv1.ResourceAttributes{
				Namespace: a.Namespace, Verb: "use", Group: "auto.pulumi.com",
				Resource: "workspaces", Subresource: "rpc", Name: a.Workspace,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return status.Errorf(codes.Unavailable, "subject access review: %v", err)
	}
	if !sar.Status.Allowed {
		return status.Error(codes.PermissionDenied, fmt.Sprintf("%s may not use workspace %s/%s", tr.Status.User.Username, a.Namespace, a.Workspace))
	}
	return nil
}

// healthService is open to unauthenticated callers: the kubelet's gRPC probe
// sends no token.
const healthService = "/grpc.health.v1.Health/"

func bearer(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok {
			return t
		}
	}
	return ""
}

// UnaryAuth rejects unauthenticated unary calls.
func UnaryAuth(a Authenticator) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !strings.HasPrefix(info.FullMethod, healthService) {
			if err := a.Authenticate(ctx, bearer(ctx)); err != nil {
				return nil, err
			}
		}
		return handler(ctx, req)
	}
}

// StreamAuth rejects unauthenticated streaming calls.
func StreamAuth(a Authenticator) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !strings.HasPrefix(info.FullMethod, healthService) {
			if err := a.Authenticate(ss.Context(), bearer(ss.Context())); err != nil {
				return err
			}
		}
		return handler(srv, ss)
	}
}
