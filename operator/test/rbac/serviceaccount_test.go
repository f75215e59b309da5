package rbac

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// The roles under test, as installed.
var (
	clusterRoleFile    = filepath.Join("operator", "config", "rbac", "role.yaml")
	leaderElectionFile = filepath.Join("operator", "config", "manager", "role_binding.yaml")
	metricsAuthFile    = filepath.Join("operator", "config", "rbac", "metrics_auth_role.yaml")
	metricsReaderFile  = filepath.Join("operator", "config", "rbac", "metrics_reader_role.yaml")
)

// loadRoles reads the ClusterRoles and Roles of a manifest file (relative to
// the repository root).
func loadRoles(t testing.TB, file string) (cluster []rbacv1.ClusterRole, namespaced []rbacv1.Role) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(substrate.RepoRoot(), file))
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		switch u.GetKind() {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
				t.Fatal(err)
			}
			cluster = append(cluster, r)
		case "Role":
			var r rbacv1.Role
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
				t.Fatal(err)
			}
			namespaced = append(namespaced, r)
		}
	}
	return cluster, namespaced
}

// forbidden records the requests the API server answered 403.
type forbidden struct {
	mu       sync.Mutex
	requests []string
}

func (f *forbidden) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// operatorIdentity creates, in namespace ns, the ServiceAccount
// stackflow-operator bound to the generated ClusterRole and the metrics
// authentication ClusterRole (under names unique to ns) and, in ns, the
// leader election Role; it returns a config
// impersonating that ServiceAccount (with its groups, as a token of it would
// authenticate), and the record of its 403 answers.
func operatorIdentity(t *testing.T, ns string) (*rest.Config, *forbidden) {
	t.Helper()
	cp := controlPlane(t)
	ctx := context.Background()
	const sa = "stackflow-operator"
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}
	objs := []client.Object{&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}}
	cluster, _ := loadRoles(t, clusterRoleFile)
	if len(cluster) != 1 {
		t.Fatalf("%s has %d ClusterRoles, want 1", clusterRoleFile, len(cluster))
	}
	metricsAuth, _ := loadRoles(t, metricsAuthFile)
	if len(metricsAuth) != 1 {
		t.Fatalf("%s has %d ClusterRoles, want 1", metricsAuthFile, len(metricsAuth))
	}
	for _, r := range append(cluster, metricsAuth...) {
		r.Name = r.Name + "-" + ns
		r.ResourceVersion = ""
		objs = append(objs, r.DeepCopy(), &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: r.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.Name},
			Subjects:   subjects,
		})
	}
	_, roles := loadRoles(t, leaderElectionFile)
	if len(roles) == 0 {
		t.Fatalf("%s has no leader election Role", leaderElectionFile)
	}
	for _, r := range roles {
		r.Namespace = ns
		objs = append(objs, r.DeepCopy(), &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: r.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name},
			Subjects:   subjects,
		})
	}
	for _, o := range objs {
		if err := cp.Client.Create(ctx, o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	t.Cleanup(func() {
		for _, o := range objs {
			if o.GetNamespace() == "" {
				_ = cp.Client.Delete(context.Background(), o)
			}
		}
	})

	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: fmt.Sprintf("system:serviceaccount:%s:%s", ns, sa),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	// RBAC bindings take effect within the authorizer's cache refresh: wait
	// until the ServiceAccount may read Stacks.
	c, err := client.New(cfg, client.Options{Scheme: operator.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	substrate.Eventually(t, 30*time.Second, "the ServiceAccount's bindings to apply", func() (bool, error) {
		err := c.List(ctx, &pulumiv1.StackList{})
		return err == nil, err
	})

	f := &forbidden{}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && resp.StatusCode == http.StatusForbidden {
				f.mu.Lock()
				f.requests = append(f.requests, r.Method+" "+r.URL.String())
				f.mu.Unlock()
			}
			return resp, err
		})
	}
	// Whatever else failed, say what was refused (a timeout is often a 403).
	t.Cleanup(func() {
		if reqs := f.list(); len(reqs) > 0 {
			t.Errorf("the API server refused the operator (403): %v", reqs)
		}
	})
	return cfg, f
}

// assertNoForbidden fails the test when the operator was refused anything.
func assertNoForbidden(t *testing.T, f *forbidden) {
	t.Helper()
	if reqs := f.list(); len(reqs) > 0 {
		t.Fatalf("the API server refused the operator %d requests (403), the generated role lacks what they need:\n%v", len(reqs), reqs)
	}
}

// startOperator runs the operator in this process as cfg's identity, with
// leader election on (its Lease in leaseNamespace), until the test ends.
func startOperator(t *testing.T, cfg *rest.Config, opts operator.Options, leaseNamespace string) {
	t.Helper()
	skip := true
	mo := ctrl.Options{
		Scheme: operator.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: operator.CacheOptions(opts.WatchNamespaces), Controller: config.Controller{SkipNameValidation: &skip},
	}
	le := operator.LeaderElection{Enabled: true, Namespace: leaseNamespace, Identity: "rbac-test",
		LeaseDuration: operator.DefaultLeaseDuration, RenewDeadline: operator.DefaultRenewDeadline, RetryPeriod: operator.DefaultRetryPeriod}
	if _, err := le.Apply(cfg, &mo); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(cfg, mo)
	if err != nil {
		t.Fatal(err)
	}
	op, err := operator.Setup(mgr, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("operator: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("the operator did not stop within a minute")
		}
		op.Close()
	})
}

// saClient is a client acting as cfg's identity (without recording 403s, for
// the test's own checks of what it may not do).
func saClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = nil
	c, err := client.New(cfg, client.Options{Scheme: operator.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
