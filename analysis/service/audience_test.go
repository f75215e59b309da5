package service

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/stackflow-io/stackflow/analysis/tokensecret"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// parseFlags binds Options to a flag set and parses args, as the binary does.
func parseFlags(t *testing.T, args ...string) Options {
	t.Helper()
	var o Options
	fs := flag.NewFlagSet("stackflow-analysis", flag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestAudiencesFlag(t *testing.T) {
	if o := parseFlags(t); strings.Join(o.Audiences, ",") != DefaultAudience {
		t.Fatalf("default audiences %q, want %q", o.Audiences, DefaultAudience)
	}
	if o := parseFlags(t, "--audiences=a, b", "--audiences=c"); strings.Join(o.Audiences, ",") != "a,b,c" {
		t.Fatalf("audiences %q, want a,b,c (the default replaced)", o.Audiences)
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o Options
	o.BindFlags(fs)
	if err := fs.Parse([]string{"--audiences= , "}); err == nil || !strings.Contains(err.Error(), "at least one audience") {
		t.Fatalf("empty --audiences: %v", err)
	}
}

// TestAudiencesAgainstAPIServer runs the service with its default flags and
// Kubernetes authentication against a real kube-apiserver: the TokenReview
// is asked for the audience stackflow-analysis, so a ServiceAccount token
// for the API server's own audience (a pod's default token) is refused with
// 401, and a token of the same ServiceAccount for stackflow-analysis (what a
// projected token volume with that audience holds) is accepted.
func TestAudiencesAgainstAPIServer(t *testing.T) {
	cp := substrate.StartControlPlaneT(t)
	ctx := context.Background()
	ns := cp.Namespace(t)
	admin := kubernetes.NewForConfigOrDie(cp.Config)
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "verifier"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "stack-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"pulumi.com"}, Resources: []string{"stacks"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "verifier"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "stack-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "verifier", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(audiences ...string) string {
		t.Helper()
		tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "verifier", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: audiences}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}

	o := parseFlags(t) // the binary's defaults: --auth=kube, --audiences=stackflow-analysis
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	o.Config, o.Listener, o.Log, o.Ready, o.WatchNamespaces = cp.Config, ln, logr.Discard(), ready, []string{ns}
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

	ask := func(tok string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/v1/namespaces/"+ns+"/stacks/web/verification?commit=0123456", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}
	apiServerToken := token() // the API server's audience, as a pod's default token
	code, body := ask(apiServerToken)
	if code != http.StatusUnauthorized || !strings.Contains(body["message"].(string), `"stackflow-analysis"`) {
		t.Fatalf("a token for the API server's audience: %d %v, want 401 naming the accepted audience", code, body)
	}
	t.Logf("API server's audience: %d %s", code, body["message"])
	if code, body := ask(token("some-other-service")); code != http.StatusUnauthorized {
		t.Fatalf("a token for another audience: %d %v, want 401", code, body)
	}
	if code, body := ask(token(DefaultAudience)); code != http.StatusOK || body["reason"] != "StackNotFound" {
		t.Fatalf("a token for %s: %d %v, want 200 (Pending, StackNotFound)", DefaultAudience, code, body)
	}
}

// TestREADMEListsEveryFlag: every flag of the service and of refresh-token
// is in the Flags section of analysis/README.md, so --help and the README
// stay in step.
func TestREADMEListsEveryFlag(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start, end := strings.Index(readme, "## Flags"), strings.Index(readme, "## Install")
	if start < 0 || end < start {
		t.Fatal("no Flags section before Install in analysis/README.md")
	}
	// The flags named in the first cell of a table row.
	listed := map[string]bool{}
	for _, line := range strings.Split(readme[start:end], "\n") {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "| `--") || len(cells) < 3 {
			continue
		}
		for _, name := range strings.Split(cells[1], ",") {
			listed[strings.Trim(strings.TrimSpace(name), "`")] = true
		}
	}
	var o Options
	fs := flag.NewFlagSet("stackflow-analysis", flag.ContinueOnError)
	o.BindFlags(fs)
	var ro tokensecret.Options
	rfs := flag.NewFlagSet("refresh-token", flag.ContinueOnError)
	ro.BindFlags(rfs)
	for _, set := range []*flag.FlagSet{fs, rfs} {
		set.VisitAll(func(f *flag.Flag) {
			if !listed["--"+f.Name] {
				t.Errorf("%s --%s is not in the Flags section of analysis/README.md", set.Name(), f.Name)
			}
		})
	}
}
