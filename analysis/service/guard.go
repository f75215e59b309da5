package service

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stackflow-io/stackflow/analysis/server"
)

// allowAll is --auth=none.
type allowAll struct{}

func (allowAll) Stack(*http.Request, string, string) error { return nil }
func (allowAll) Path(*http.Request, string) error          { return nil }

func newGuard(o Options, reg prometheus.Registerer) (server.Guard, error) {
	if o.Auth == AuthNone {
		o.Log.Info("WARNING: --auth=none: anyone who reaches this service may read every Stack's verification; use it for local demos only")
		return allowAll{}, nil
	}
	return newKubeGuard(o, reg)
}
