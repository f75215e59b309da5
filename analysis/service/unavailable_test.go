package service

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/stackflow-io/stackflow/test/framework/leaks"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestReviewRefusedDetailOnlyInLog runs the service against a real
// kube-apiserver as a ServiceAccount of its own that may read Stacks and
// Updates but was not bound to system:auth-delegator: the API server refuses
// its TokenReview with a 403 naming that ServiceAccount. A caller (with a
// good token) gets 503 ServiceUnavailable in the service's own words and a
// request ID; neither the service's identity, nor the API server's address,
// nor the review's resource or the fix is in the answer. The log line with
// that request ID has them.
func TestReviewRefusedDetailOnlyInLog(t *testing.T) {
	cp := substrate.StartControlPlaneT(t)
	ctx := context.Background()
	ns := cp.Namespace(t)
	admin := kubernetes.NewForConfigOrDie(cp.Config)
	for _, name := range []string{"analysis", "verifier"} {
		if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "analysis-cache"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"pulumi.com"}, Resources: []string{"stacks"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"auto.pulumi.com"}, Resources: []string{"updates"}, Verbs: []string{"get", "list", "watch"}},
		}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "analysis-cache"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "analysis-cache"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "analysis", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(sa string, audiences ...string) string {
		t.Helper()
		tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: audiences}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	self := rest.AnonymousClientConfig(cp.Config)
	self.BearerToken = token("analysis")
	identity := "system:serviceaccount:" + ns + ":analysis"

	var mu sync.Mutex
	var logs strings.Builder
	o := parseFlags(t) // --auth=kube, --audiences=stackflow-analysis
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	o.Config, o.Listener, o.Ready, o.WatchNamespaces = self, ln, ready, []string{ns}
	o.Log = funcr.New(func(prefix, args string) { mu.Lock(); defer mu.Unlock(); logs.WriteString(prefix + " " + args + "\n") }, funcr.Options{})
	go func() { done <- Run(runCtx, o) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(time.Minute):
		t.Fatal("not ready in a minute")
	}

	req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/v1/namespaces/"+ns+"/stacks/web/verification?commit=0123456", nil)
	req.Header.Set("Authorization", "Bearer "+token("verifier", DefaultAudience))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var body struct{ Reason, Message, RequestID string }
	if err := json.Unmarshal(b, &body); err != nil || resp.StatusCode != http.StatusServiceUnavailable || body.Reason != "ServiceUnavailable" || body.RequestID == "" {
		t.Fatalf("HTTP %d %s, want 503 ServiceUnavailable with a request ID", resp.StatusCode, b)
	}
	leaks.AssertNone(t, []string{identity, cp.Config.Host, "tokenreviews.authentication.k8s.io", "system:auth-delegator"}, map[string]string{"the answer": string(b)})
	t.Logf("answer: %s", b)

	mu.Lock()
	defer mu.Unlock()
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, body.RequestID) {
			line = l
		}
	}
	if !strings.Contains(line, identity) || !strings.Contains(line, "system:auth-delegator") {
		t.Fatalf("the log line of request %s lacks the detail (%s, the fix):\n%s", body.RequestID, identity, logs.String())
	}
}
