package service

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/stackflow-io/stackflow/analysis/server"
	"github.com/stackflow-io/stackflow/internal/kubeauth"
)

// kubeGuard is --auth=kube: the bearer token is checked with TokenReview for
// --audiences, access with SubjectAccessReview, both cached for
// --auth-cache-ttl.
type kubeGuard struct{ a *kubeauth.Authorizer }

func newKubeGuard(o Options, reg prometheus.Registerer) (server.Guard, error) {
	cs, err := kubernetes.NewForConfig(o.Config)
	if err != nil {
		return nil, err
	}
	return kubeGuard{a: kubeauth.New(kubeauth.Options{Client: cs, TTL: o.AuthCacheTTL, Audiences: o.audiences(), RefreshAhead: true, Registerer: reg})}, nil
}

func (g kubeGuard) Stack(r *http.Request, namespace, name string) error {
	_, err := g.a.Check(r, kubeauth.StackTarget(namespace, name))
	return err
}

func (g kubeGuard) Path(r *http.Request, path string) error {
	_, err := g.a.Check(r, kubeauth.PathTarget(path))
	return err
}
