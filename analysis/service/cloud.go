package service

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/stackflow-io/stackflow/analysis/pulumicloud"
	"github.com/stackflow-io/stackflow/analysis/server"
	"github.com/stackflow-io/stackflow/analysis/verification"
)

// PulumiCloudTokenKey is the key of --pulumi-cloud-token-secret that holds
// the access token.
const PulumiCloudTokenKey = "accessToken"

// tokenTTL is how long the access token read from its Secret is reused: a
// rotated token is picked up within it.
const tokenTTL = 30 * time.Second

func newCloud(_ context.Context, o Options) (server.Cloud, error) {
	if o.PulumiCloudTokenSecret == "" {
		return nil, nil
	}
	ns, name, _ := strings.Cut(o.PulumiCloudTokenSecret, "/")
	cs, err := kubernetes.NewForConfig(o.Config)
	if err != nil {
		return nil, err
	}
	ts := &secretToken{client: cs, namespace: ns, name: name, now: time.Now}
	ttl := o.PulumiCloudCacheTTL
	if ttl <= 0 {
		ttl = pulumicloud.DefaultCacheTTL
	}
	o.Log.Info("Pulumi Cloud verification is on", "api", o.PulumiCloudURL, "tokenSecret", o.PulumiCloudTokenSecret)
	return &cloud{Client: pulumicloud.New(pulumicloud.Options{BaseURL: o.PulumiCloudURL, Token: ts.Token, CacheTTL: ttl, Timeout: o.PulumiCloudTimeout}), poll: ttl}, nil
}

// cloud adapts the Pulumi Cloud client to the server.
type cloud struct {
	*pulumicloud.Client
	poll time.Duration
}

func (c *cloud) ValidName(s string) bool     { return pulumicloud.ValidName(s) }
func (c *cloud) PollInterval() time.Duration { return c.poll }

var _ interface {
	Verify(context.Context, string, string, string, verification.Query) verification.Result
} = (*cloud)(nil)

// secretToken reads the access token from its Secret, at most every
// tokenTTL. Errors name the Secret, never its content.
type secretToken struct {
	client          kubernetes.Interface
	namespace, name string
	now             func() time.Time

	mu      sync.Mutex
	token   string
	fetched time.Time
}

func (s *secretToken) Token(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != "" && s.now().Sub(s.fetched) < tokenTTL {
		return s.token, nil
	}
	sec, err := s.client.CoreV1().Secrets(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", fmt.Errorf("Secret %s/%s (--pulumi-cloud-token-secret) does not exist", s.namespace, s.name)
	case apierrors.IsForbidden(err):
		return "", fmt.Errorf("the service may not read Secret %s/%s: apply analysis/config/pulumi-cloud", s.namespace, s.name)
	case err != nil:
		return "", fmt.Errorf("read Secret %s/%s: %w", s.namespace, s.name, err)
	}
	tok := strings.TrimSpace(string(sec.Data[PulumiCloudTokenKey]))
	if tok == "" {
		return "", fmt.Errorf("Secret %s/%s has no %s key", s.namespace, s.name, PulumiCloudTokenKey)
	}
	s.token, s.fetched = tok, s.now()
	return tok, nil
}
