package operator

import (
	"net/http"
	"testing"

	"github.com/stackflow-io/stackflow/operator/internal/artifact"
)

// TestServersHaveTimeouts: every server the operator runs bounds reading a
// request's headers, the whole request, writing the response and idle
// keep-alive connections (controller-runtime's own metrics and probe servers
// set no read or write timeout).
func TestServersHaveTimeouts(t *testing.T) {
	for name, srv := range map[string]*http.Server{
		"metrics and probes": newEndpointServer(http.NotFoundHandler()),
		"artifacts":          (&artifact.Store{}).NewServer(),
	} {
		if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 || srv.MaxHeaderBytes <= 0 {
			t.Errorf("%s: read header %s, read %s, write %s, idle %s, max header bytes %d: want all set",
				name, srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
		}
		if srv.ReadHeaderTimeout > srv.ReadTimeout {
			t.Errorf("%s: read header timeout %s exceeds the read timeout %s", name, srv.ReadHeaderTimeout, srv.ReadTimeout)
		}
	}
}
