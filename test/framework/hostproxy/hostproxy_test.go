package hostproxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// TestRoutesNamedHostsOnly: a routed name reaches its loopback server with
// the Host header the client sent; any other host is refused without leaving
// the machine.
func TestRoutesNamedHostsOnly(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Host+" "+r.URL.RequestURI())
	}))
	defer backend.Close()
	p, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Route("svc.example.test:8080", backend.Listener.Addr().String())
	p.Route("github.example.test", backend.Listener.Addr().String())
	proxyURL, _ := url.Parse(p.URL)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	for _, tc := range []struct {
		url, body string
		status    int
	}{
		{"http://svc.example.test:8080/v1/x?y=1", "svc.example.test:8080 /v1/x?y=1", 200},
		{"http://github.example.test/o/r.git/info/refs", "github.example.test /o/r.git/info/refs", 200},
		{"http://github.example.test:80/a", "github.example.test:80 /a", 200},
		{"http://elsewhere.example.test/", "", http.StatusBadGateway},
		{"http://svc.example.test:9090/", "", http.StatusBadGateway},
	} {
		resp, err := client.Get(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || (tc.body != "" && string(b) != tc.body) {
			t.Errorf("%s: %d %q, want %d %q", tc.url, resp.StatusCode, b, tc.status, tc.body)
		}
	}
}
