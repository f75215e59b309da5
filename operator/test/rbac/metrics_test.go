package rbac

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestMetricsNeedAnAuthorizedToken: the operator's metrics server, running
// as the operator's ServiceAccount with the shipped roles, serves /metrics
// over HTTPS only to a bearer token whose user may get /metrics: 401 without
// a token, 403 naming stackflow-metrics-reader for a ServiceAccount without
// it, 200 once that ServiceAccount is bound to the shipped reader role; plain
// HTTP is refused. The operator's own reviews are never refused (no 403).
func TestMetricsNeedAnAuthorizedToken(t *testing.T) {
	cp := controlPlane(t)
	ctx := context.Background()
	ns := cp.Namespace(t)
	cfg, _ := operatorIdentity(t, ns)
	skip := true
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: operator.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: &skip}})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := operator.AddMetricsServer(mgr, operator.MetricsOptions{Addr: "127.0.0.1:0", Auth: operator.MetricsAuthKube})
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	// A scraper's ServiceAccount and a real token of it.
	scraper := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scraper"}}
	if err := cp.Client.Create(ctx, scraper); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, scraper.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tr.Status.Token

	https := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the operator's self-signed certificate
	get := func(scheme, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := https.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	substrate.Eventually(t, time.Minute, "the metrics server to answer", func() (bool, error) {
		code, body := get("https", "")
		return code != 0, fmt.Errorf("%s", body)
	})

	if code, body := get("https", ""); code != http.StatusUnauthorized {
		t.Errorf("no token: HTTP %d %q, want 401", code, body)
	}
	if code, body := get("https", "not-a-token"); code != http.StatusUnauthorized {
		t.Errorf("a bad token: HTTP %d %q, want 401", code, body)
	}
	if code, body := get("https", token); code != http.StatusForbidden || !strings.Contains(body, "stackflow-metrics-reader") {
		t.Errorf("a token without the reader role: HTTP %d %q, want 403 naming stackflow-metrics-reader", code, body)
	}
	if code, _ := get("http", token); code == http.StatusOK {
		t.Error("plain HTTP served the metrics")
	}

	readers, _ := loadRoles(t, metricsReaderFile)
	if len(readers) != 1 {
		t.Fatalf("%s: %d ClusterRoles, want 1", metricsReaderFile, len(readers))
	}
	reader := readers[0].DeepCopy()
	reader.Name += "-" + ns
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: reader.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: scraper.Name}},
	}
	for _, o := range []client.Object{reader, binding} {
		if err := cp.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), o) })
	}
	// A denial is cached for a few seconds: the grant shows after it.
	substrate.Eventually(t, time.Minute, "the bound scraper to read the metrics", func() (bool, error) {
		code, body := get("https", token)
		return code == http.StatusOK && strings.Contains(body, "# HELP"), fmt.Errorf("HTTP %d: %.200s", code, body)
	})
}
