package kubeauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/stackflow-io/stackflow/test/framework/leaks"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestAgainstAPIServer runs the Authorizer against a real kube-apiserver
// (envtest: RBAC authorisation, ServiceAccount token signing) with real
// ServiceAccount tokens from the TokenRequest API.
func TestAgainstAPIServer(t *testing.T) {
	cp := substrate.StartControlPlaneT(t)
	logAPIServerFlags(t, cp.Env.ControlPlane.APIServer.CertDir)
	admin, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := cp.Namespace(t)
	sa := func(name string) *corev1.ServiceAccount {
		t.Helper()
		s, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx,
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	token := func(name string, audiences ...string) string {
		t.Helper()
		tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: audiences},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenRequest for %s: %v", name, err)
		}
		return tr.Status.Token
	}
	verifierSA, nobodySA, goneSA := sa("verifier"), sa("nobody"), sa("gone")
	verifierName := "system:serviceaccount:" + ns + ":verifier"
	nobodyName := "system:serviceaccount:" + ns + ":nobody"

	// RBAC: verifier may get Stacks in ns and the /v1/pulumi/* routes;
	// nobody has nothing.
	mustCreate(t, func() error {
		_, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "stack-reader"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"pulumi.com"}, Resources: []string{"stacks"}, Verbs: []string{"get"}}},
		}, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, func() error {
		_, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "verifier-stack-reader"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "stack-reader"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "verifier", Namespace: ns}},
		}, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, func() error {
		_, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: ns + "-pulumi-routes"},
			Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/v1/pulumi/*"}, Verbs: []string{"get"}}},
		}, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, func() error {
		_, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: ns + "-verifier-pulumi-routes"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: ns + "-pulumi-routes"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "verifier", Namespace: ns}},
		}, metav1.CreateOptions{})
		return err
	})

	verifierTok, nobodyTok, goneTok := token("verifier"), token("nobody"), token("gone")
	verifierAud := token("verifier", "stackflow-analysis")
	verifierOtherAud := token("verifier", "some-other-service")

	// The RBAC authoriser sees new bindings through its informers: wait
	// until an uncached Authorizer is allowed.
	uncached := New(Options{Client: admin, TTL: -1})
	waitFor(t, "RBAC to allow verifier", func() bool {
		u, err := uncached.Authenticate(ctx, verifierTok)
		if err != nil {
			return false
		}
		_, err1 := uncached.AuthorizeStack(ctx, u, ns, "web")
		_, err2 := uncached.AuthorizePath(ctx, u, "/v1/pulumi/acme/web/dev")
		return err1 == nil && err2 == nil
	})

	clk := newClock()
	a := New(Options{Client: admin, Now: clk.Now})

	t.Run("authenticate", func(t *testing.T) {
		for _, tc := range []struct {
			token string
			sa    *corev1.ServiceAccount
		}{{verifierTok, verifierSA}, {nobodyTok, nobodySA}} {
			u, err := a.Authenticate(ctx, tc.token)
			if err != nil {
				t.Fatalf("%s: %v", tc.sa.Name, err)
			}
			want := "system:serviceaccount:" + ns + ":" + tc.sa.Name
			if u.Name != want || u.UID != string(tc.sa.UID) {
				t.Fatalf("user = %+v, want %s uid %s", u, want, tc.sa.UID)
			}
			for _, g := range []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"} {
				if !contains(u.Groups, g) {
					t.Fatalf("groups %v lack %s", u.Groups, g)
				}
			}
			t.Logf("%s: groups %v, extra %v", u.Name, u.Groups, u.Extra)
		}
	})

	t.Run("rejected tokens", func(t *testing.T) {
		key := readECKey(t, filepath.Join(cp.Env.ControlPlane.APIServer.CertDir, "sa-signer.key"))
		forgedKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		expired := resign(t, verifierTok, key, func(c map[string]any) {
			c["iat"], c["nbf"], c["exp"] = now.Add(-2*time.Hour).Unix(), now.Add(-2*time.Hour).Unix(), now.Add(-time.Hour).Unix()
		})
		// The same claims re-signed with the server's key are accepted:
		// the re-signing itself is sound.
		if _, err := a.Authenticate(ctx, resign(t, verifierTok, key, func(map[string]any) {})); err != nil {
			t.Fatalf("re-signed valid token: %v", err)
		}
		// The ServiceAccount "gone" is deleted: its token no longer
		// authenticates.
		if err := admin.CoreV1().ServiceAccounts(ns).Delete(ctx, goneSA.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name, token, detail string
		}{
			{"garbage", "garbage", "invalid bearer token"},
			{"expired", expired, "expired"},
			{"forged (other signing key)", resign(t, verifierTok, forgedKey, func(map[string]any) {}), "invalid bearer token"},
			{"for another audience", verifierOtherAud, "invalid bearer token"},
			{"deleted ServiceAccount", goneTok, "invalid bearer token"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var u User
				var err error
				if tc.name == "deleted ServiceAccount" {
					// Lookup of the ServiceAccount reads a cache: poll.
					waitFor(t, "the deleted ServiceAccount's token to fail", func() bool {
						_, err = uncached.Authenticate(ctx, tc.token)
						return err != nil
					})
				}
				u, err = a.Authenticate(ctx, tc.token)
				var ue *UnauthenticatedError
				if !errors.As(err, &ue) || ue.Kind != Rejected || StatusCode(err) != http.StatusUnauthorized {
					t.Fatalf("user %+v err %#v, want Rejected 401", u, err)
				}
				if !strings.Contains(ue.Detail, tc.detail) {
					t.Fatalf("detail %q lacks %q", ue.Detail, tc.detail)
				}
				if strings.Contains(err.Error(), tc.token) {
					t.Fatalf("message holds the token: %s", err)
				}
				t.Logf("401: %s", err)
			})
		}
	})

	t.Run("audiences", func(t *testing.T) {
		b := New(Options{Client: admin, Audiences: []string{"stackflow-analysis"}})
		if u, err := b.Authenticate(ctx, verifierAud); err != nil || u.Name != verifierName {
			t.Fatalf("%+v %v", u, err)
		}
		for name, tok := range map[string]string{"default audience": verifierTok, "other audience": verifierOtherAud} {
			if _, err := b.Authenticate(ctx, tok); StatusCode(err) != http.StatusUnauthorized {
				t.Fatalf("%s: %v, want 401", name, err)
			} else {
				t.Logf("%s: 401: %s", name, err)
			}
		}
	})

	t.Run("authorize", func(t *testing.T) {
		v, err := a.Authenticate(ctx, verifierTok)
		if err != nil {
			t.Fatal(err)
		}
		n, err := a.Authenticate(ctx, nobodyTok)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := a.AuthorizeStack(ctx, v, ns, "web"); err != nil || !d.Allowed {
			t.Fatalf("verifier stack: %+v %v", d, err)
		}
		if d, err := a.AuthorizePath(ctx, v, "/v1/pulumi/acme/web/dev"); err != nil || !d.Allowed {
			t.Fatalf("verifier path: %+v %v", d, err)
		}
		for _, tc := range []struct {
			name string
			call func() (Decision, error)
			want string
		}{
			{"nobody stack", func() (Decision, error) { return a.AuthorizeStack(ctx, n, ns, "web") },
				`"` + nobodyName + `" cannot get stacks.pulumi.com "web" in namespace "` + ns + `": grant it get on stacks.pulumi.com (see analysis/config/kargo-project)`},
			{"verifier in another namespace", func() (Decision, error) { return a.AuthorizeStack(ctx, v, "default", "web") },
				`"` + verifierName + `" cannot get stacks.pulumi.com "web" in namespace "default": grant it get on stacks.pulumi.com (see analysis/config/kargo-project)`},
			{"nobody path", func() (Decision, error) { return a.AuthorizePath(ctx, n, "/v1/pulumi/acme/web/dev") },
				`"` + nobodyName + `" cannot get path "/v1/pulumi/acme/web/dev"`},
			{"verifier outside /v1/pulumi", func() (Decision, error) { return a.AuthorizePath(ctx, v, "/v2/other") },
				`"` + verifierName + `" cannot get path "/v2/other"`},
		} {
			d, err := tc.call()
			var fe *ForbiddenError
			if !errors.As(err, &fe) || d.Allowed || StatusCode(err) != http.StatusForbidden {
				t.Fatalf("%s: %+v %#v, want 403", tc.name, d, err)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("%s:\n got %s\nwant %s…", tc.name, err, tc.want)
			}
			t.Logf("403: %s", err)
		}
	})

	t.Run("check and cache figures", func(t *testing.T) {
		c := New(Options{Client: admin, Now: clk.Now})
		const calls = 20
		for i := range calls {
			for _, tc := range []struct {
				tok    string
				target Target
				status int
			}{
				{verifierTok, StackTarget(ns, "web"), 200},
				{verifierTok, PathTarget("/v1/pulumi/acme/web/dev"), 200},
				{nobodyTok, StackTarget(ns, "web"), 403},
				{"garbage", StackTarget(ns, "web"), 401},
			} {
				r := httptest.NewRequest("GET", "/v1/verify", nil)
				r.Header.Set("Authorization", "Bearer "+tc.tok)
				if _, err := c.Check(r, tc.target); StatusCode(err) != tc.status {
					t.Fatalf("call %d: status %d (%v), want %d", i, StatusCode(err), err, tc.status)
				}
			}
		}
		s := c.Stats()
		t.Logf("%d rounds of 4 checks: token %+v; access %+v", calls, s.Token, s.Access)
		// 3 distinct tokens, 3 distinct (user, permission) pairs.
		if s.Token.Reviews != 3 || s.Token.Hits != 4*calls-3 || s.Access.Reviews != 3 || s.Access.Hits != 3*calls-3 {
			t.Fatalf("stats = %+v", s)
		}
	})

	t.Run("revocation shows after TTL", func(t *testing.T) {
		clk := newClock()
		c := New(Options{Client: admin, Now: clk.Now})
		v, err := c.Authenticate(ctx, verifierTok)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.AuthorizeStack(ctx, v, ns, "web"); err != nil {
			t.Fatal(err)
		}
		if err := admin.RbacV1().RoleBindings(ns).Delete(ctx, "verifier-stack-reader", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "RBAC to deny verifier", func() bool {
			_, err := uncached.AuthorizeStack(ctx, v, ns, "web")
			return StatusCode(err) == http.StatusForbidden
		})
		clk.Advance(DefaultTTL - time.Millisecond)
		if d, err := c.AuthorizeStack(ctx, v, ns, "web"); err != nil || !d.Cached {
			t.Fatalf("within TTL: %+v %v, want the cached allow", d, err)
		}
		clk.Advance(time.Millisecond)
		if d, err := c.AuthorizeStack(ctx, v, ns, "web"); StatusCode(err) != http.StatusForbidden || d.Cached {
			t.Fatalf("after TTL: %+v %v, want a fresh 403", d, err)
		}
	})

	t.Run("service identity needs auth-delegator", func(t *testing.T) {
		sa("analysis")
		cfg := rest.AnonymousClientConfig(cp.Config)
		cfg.BearerToken = token("analysis")
		self, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		d := New(Options{Client: self, TTL: -1})
		_, err = d.Authenticate(ctx, verifierTok)
		var ue *UnavailableError
		if !errors.As(err, &ue) || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "system:auth-delegator") {
			t.Fatalf("without the binding: %v", err)
		}
		if strings.Contains(err.Error(), verifierTok) {
			t.Fatal("message holds the token")
		}
		// The API server's text names the service's own identity: for the
		// log (Error), never for the answer (Message).
		identity := "system:serviceaccount:" + ns + ":analysis"
		if !strings.Contains(err.Error(), identity) {
			t.Fatalf("the error for the log does not name the service's identity %s: %v", identity, err)
		}
		leaks.AssertNone(t, []string{identity, cp.Config.Host, verifierTok}, map[string]string{"the message": ue.Message()})
		t.Logf("503: %s (answered: %s)", err, ue.Message())
		mustCreate(t, func() error {
			_, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: ns + "-analysis-auth-delegator"},
				RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:auth-delegator"},
				Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "analysis", Namespace: ns}},
			}, metav1.CreateOptions{})
			return err
		})
		waitFor(t, "auth-delegator to apply", func() bool {
			u, err := d.Authenticate(ctx, verifierTok)
			if err != nil {
				return false
			}
			_, err = d.AuthorizePath(ctx, u, "/v1/pulumi/x")
			return err == nil
		})
	})

	t.Run("api server unreachable", func(t *testing.T) {
		cfg := rest.CopyConfig(cp.Config)
		cfg.Host = "https://127.0.0.1:1" // nothing listens
		down, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		d := New(Options{Client: down, Timeout: 2 * time.Second})
		for range 2 {
			_, err = d.Authenticate(ctx, verifierTok)
			if StatusCode(err) != http.StatusServiceUnavailable || strings.Contains(err.Error(), verifierTok) {
				t.Fatalf("err = %v", err)
			}
		}
		if s := d.Stats().Token; s.Errors != 2 || s.Entries != 0 {
			t.Fatalf("stats = %+v: failures must not be cached", s)
		}
		var ue *UnavailableError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Fatalf("err = %v, want an *UnavailableError naming the address for the log", err)
		}
		leaks.AssertNone(t, []string{"https://127.0.0.1:1", verifierTok}, map[string]string{"the message": ue.Message()})
		t.Logf("503: %s (answered: %s)", err, ue.Message())
	})
}

func mustCreate(t *testing.T, f func() error) {
	t.Helper()
	if err := f(); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func readECKey(t *testing.T, path string) *ecdsa.PrivateKey {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		t.Fatalf("%s: %T, want an ECDSA key", path, k)
	}
	return ek
}

// resign returns tok with its claims changed by edit and signed (ES256) by key,
// keeping its header.
func resign(t *testing.T, tok string, key *ecdsa.PrivateKey, edit func(map[string]any)) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT")
	}
	hdr, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]any
	if err := json.Unmarshal(hdr, &h); err != nil || h["alg"] != "ES256" {
		t.Fatalf("header %s: %v (want alg ES256)", hdr, err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	claims := map[string]any{}
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatal(err)
	}
	edit(claims)
	body, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	signing := parts[0] + "." + base64.RawURLEncoding.EncodeToString(body)
	sum := sha256.Sum256([]byte(signing))
	r, s, err := ecdsa.Sign(rand.Reader, key, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// logAPIServerFlags logs the authentication and authorisation flags of the
// kube-apiserver whose cert dir is certDir, read from /proc (Linux).
func logAPIServerFlags(t *testing.T, certDir string) {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), "kube-apiserver") || !strings.Contains(string(b), certDir) {
			continue
		}
		for _, arg := range strings.Split(string(b), "\x00") {
			for _, f := range []string{"--authorization-mode", "--service-account-", "--client-ca-file", "--api-audiences", "--disable-admission-plugins", "--authentication"} {
				if strings.HasPrefix(arg, f) {
					t.Logf("kube-apiserver %s", arg)
				}
			}
		}
		return
	}
	t.Logf("kube-apiserver process for %s not found in /proc", certDir)
}
