package tokensecret

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Annotations the refresh writes on the Secret, so a person sees what it
// holds and until when without decoding the token.
const (
	AudienceAnnotation       = "stackflow.io/token-audience"
	ServiceAccountAnnotation = "stackflow.io/token-service-account"
	ExpiresAnnotation        = "stackflow.io/token-expires"
)

// MinExpiration is the shortest lifetime the TokenRequest API grants.
const MinExpiration = 10 * time.Minute

// Options says which token to mint and where to keep it.
type Options struct {
	// Client reaches the API server. Its identity needs create on
	// serviceaccounts/token of ServiceAccount, and get and update on the
	// Secret (analysis/config/kargo-project grants exactly that).
	Client kubernetes.Interface
	// Namespace holds the ServiceAccount and the Secret.
	Namespace string
	// ServiceAccount is whose token is minted.
	ServiceAccount string
	// Secret is the Opaque Secret the token is written to, under Key. It
	// must exist: creating Secrets cannot be limited to one name in RBAC,
	// so the refresh only updates it.
	Secret, Key string
	// Audience is the token's audience.
	Audience string
	// Expiration is the lifetime asked for (at least MinExpiration); the
	// API server may grant less (--service-account-max-token-expiration).
	Expiration time.Duration
}

// Defaults of the flags.
const (
	DefaultServiceAccount = "stackflow-verifier"
	DefaultSecret         = "stackflow-verifier-token"
	DefaultKey            = "token"
	DefaultAudience       = "stackflow-analysis"
	DefaultExpiration     = 24 * time.Hour
)

// BindFlags binds the options, but Client, to flags.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Namespace, "namespace", "", "namespace of the ServiceAccount and the Secret (default: the pod's own namespace)")
	fs.StringVar(&o.ServiceAccount, "service-account", DefaultServiceAccount, "the ServiceAccount whose token is minted")
	fs.StringVar(&o.Secret, "secret", DefaultSecret, "the Opaque Secret the token is written to; it must exist")
	fs.StringVar(&o.Key, "key", DefaultKey, "the Secret's key that holds the token")
	fs.StringVar(&o.Audience, "audience", DefaultAudience, "the token's audience: one of stackflow-analysis' --audiences")
	fs.DurationVar(&o.Expiration, "expiration", DefaultExpiration, "the lifetime asked for (at least 10m; the API server may grant less): run the refresh well within it")
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	for name, v := range map[string]string{"namespace": o.Namespace, "service account": o.ServiceAccount, "secret": o.Secret, "key": o.Key, "audience": o.Audience} {
		if v == "" {
			errs = append(errs, fmt.Errorf("the %s is required", name))
		}
	}
	if o.Expiration < MinExpiration {
		errs = append(errs, fmt.Errorf("expiration %s is too short: the TokenRequest API grants at least %s", o.Expiration, MinExpiration))
	}
	return errors.Join(errs...)
}

// Refresh mints a token of the ServiceAccount for the audience, bound to the
// Secret, and writes it into the Secret. It returns when the token expires.
// Errors name the objects and the permission missing, never the token.
func Refresh(ctx context.Context, o Options) (time.Time, error) {
	if err := o.Validate(); err != nil {
		return time.Time{}, err
	}
	secrets := o.Client.CoreV1().Secrets(o.Namespace)
	sec, err := secrets.Get(ctx, o.Secret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return time.Time{}, fmt.Errorf("Secret %s/%s does not exist: create it, empty and of type Opaque (analysis/config/kargo-project ships it)", o.Namespace, o.Secret)
	case apierrors.IsForbidden(err):
		return time.Time{}, fmt.Errorf("may not get Secret %s/%s: grant get and update on it (analysis/config/kargo-project): %w", o.Namespace, o.Secret, err)
	case err != nil:
		return time.Time{}, fmt.Errorf("get Secret %s/%s: %w", o.Namespace, o.Secret, err)
	}
	if sec.Type != corev1.SecretTypeOpaque && sec.Type != "" {
		// A Secret's type is immutable; a service-account-token Secret is
		// also rewritten by the token controller.
		return time.Time{}, fmt.Errorf("Secret %s/%s is of type %s, not Opaque: its token would carry no audience; delete it and create it as an Opaque Secret (analysis/config/kargo-project)", o.Namespace, o.Secret, sec.Type)
	}
	seconds := int64(o.Expiration / time.Second)
	tr, err := o.Client.CoreV1().ServiceAccounts(o.Namespace).CreateToken(ctx, o.ServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         []string{o.Audience},
			ExpirationSeconds: &seconds,
			// Bound to the Secret: deleting the Secret revokes the token.
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: sec.Name, UID: sec.UID},
		},
	}, metav1.CreateOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return time.Time{}, fmt.Errorf("ServiceAccount %s/%s does not exist: %w", o.Namespace, o.ServiceAccount, err)
	case apierrors.IsForbidden(err):
		return time.Time{}, fmt.Errorf("may not mint a token for ServiceAccount %s/%s: grant create on serviceaccounts/token with resourceNames [%s] (analysis/config/kargo-project): %w", o.Namespace, o.ServiceAccount, o.ServiceAccount, err)
	case err != nil:
		return time.Time{}, fmt.Errorf("mint a token for ServiceAccount %s/%s: %w", o.Namespace, o.ServiceAccount, err)
	}
	expires := tr.Status.ExpirationTimestamp.Time
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	sec.Data[o.Key] = []byte(tr.Status.Token)
	if sec.Annotations == nil {
		sec.Annotations = map[string]string{}
	}
	sec.Annotations[AudienceAnnotation] = o.Audience
	sec.Annotations[ServiceAccountAnnotation] = o.ServiceAccount
	sec.Annotations[ExpiresAnnotation] = expires.UTC().Format(time.RFC3339)
	// The update carries the resourceVersion read above: a concurrent
	// refresh makes it fail with a conflict, and the next run retries.
	if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsForbidden(err) {
			return time.Time{}, fmt.Errorf("may not update Secret %s/%s: grant get and update on it (analysis/config/kargo-project): %w", o.Namespace, o.Secret, err)
		}
		return time.Time{}, fmt.Errorf("update Secret %s/%s: %w", o.Namespace, o.Secret, err)
	}
	return expires, nil
}
