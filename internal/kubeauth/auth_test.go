package kubeauth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeAPI answers TokenReviews from a token table and SubjectAccessReviews from
// a rule function, counting the requests and failing on demand.
type fakeAPI struct {
	mu        sync.Mutex
	users     map[string]authenticationv1.UserInfo // token -> user
	allow     func(authorizationv1.SubjectAccessReviewSpec) bool
	audiences []string // returned in TokenReview status when set
	tokenErr  error    // TokenReview API failure
	sarErr    error    // SubjectAccessReview API failure
	block     chan struct{}
	tokenReqs []authenticationv1.TokenReviewSpec
	sarReqs   []authorizationv1.SubjectAccessReviewSpec
	tokenN    atomic.Int64
	sarN      atomic.Int64
}

func (f *fakeAPI) client() *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		tr := action.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		f.tokenN.Add(1)
		if f.block != nil {
			<-f.block
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.tokenReqs = append(f.tokenReqs, tr.Spec)
		if f.tokenErr != nil {
			return true, nil, f.tokenErr
		}
		if u, ok := f.users[tr.Spec.Token]; ok {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: u, Audiences: f.audiences}
		} else {
			tr.Status = authenticationv1.TokenReviewStatus{Error: "[invalid bearer token, square/go-jose: error in cryptographic primitive]"}
		}
		return true, tr, nil
	})
	c.PrependReactor("create", "subjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		sar := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		f.sarN.Add(1)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.sarReqs = append(f.sarReqs, sar.Spec)
		if f.sarErr != nil {
			return true, nil, f.sarErr
		}
		sar.Status.Allowed = f.allow != nil && f.allow(sar.Spec)
		return true, sar, nil
	})
	return c
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)} }
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var (
	verifier = authenticationv1.UserInfo{
		Username: "system:serviceaccount:kargo-demo:verifier", UID: "uid-1",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kargo-demo", "system:authenticated"},
		Extra:  map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"p-1"}},
	}
	other = authenticationv1.UserInfo{Username: "system:serviceaccount:kargo-demo:other", UID: "uid-2",
		Groups: []string{"system:serviceaccounts", "system:authenticated"}}
)

const (
	goodToken  = "good-token-0123456789"
	otherToken = "other-token-0123456789"
)

func setup(t *testing.T, o Options) (*Authorizer, *fakeAPI, *clock) {
	t.Helper()
	f := &fakeAPI{users: map[string]authenticationv1.UserInfo{goodToken: verifier, otherToken: other}}
	f.allow = func(s authorizationv1.SubjectAccessReviewSpec) bool { return s.User == verifier.Username }
	c := newClock()
	o.Client, o.Now = f.client(), c.Now
	return New(o), f, c
}

func TestAuthenticateCachesForTTL(t *testing.T) {
	a, f, c := setup(t, Options{})
	ctx := context.Background()
	want := User{Name: verifier.Username, UID: "uid-1", Groups: verifier.Groups,
		Extra: map[string][]string{"authentication.kubernetes.io/pod-name": {"p-1"}}}
	for i := range 3 {
		u, err := a.Authenticate(ctx, goodToken)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if d := cmp.Diff(want, u); d != "" {
			t.Fatalf("user (-want +got):\n%s", d)
		}
	}
	c.Advance(DefaultTTL - time.Millisecond)
	if _, err := a.Authenticate(ctx, goodToken); err != nil {
		t.Fatal(err)
	}
	if got := f.tokenN.Load(); got != 1 {
		t.Fatalf("TokenReviews within TTL = %d, want 1", got)
	}
	c.Advance(time.Millisecond)
	if _, err := a.Authenticate(ctx, goodToken); err != nil {
		t.Fatal(err)
	}
	got := a.Stats().Token
	want2 := CacheStats{Hits: 3, Misses: 2, Expired: 1, Entries: 1, Reviews: 2, Allowed: 2}
	if d := cmp.Diff(want2, got); d != "" {
		t.Fatalf("token stats (-want +got):\n%s", d)
	}
	// The returned user is a copy: changing it does not change the cache.
	u, _ := a.Authenticate(ctx, goodToken)
	u.Groups[0] = "system:masters"
	u.Extra["x"] = nil
	u2, _ := a.Authenticate(ctx, goodToken)
	if d := cmp.Diff(want, u2); d != "" {
		t.Fatalf("cached user changed (-want +got):\n%s", d)
	}
}

func TestRejectedTokenCachedForDenyTTL(t *testing.T) {
	a, f, c := setup(t, Options{})
	ctx := context.Background()
	for range 2 {
		_, err := a.Authenticate(ctx, "garbage-token")
		var ue *UnauthenticatedError
		if !errors.As(err, &ue) || ue.Kind != Rejected || StatusCode(err) != http.StatusUnauthorized {
			t.Fatalf("err = %#v, want Rejected 401", err)
		}
		if !strings.Contains(err.Error(), "invalid bearer token") {
			t.Fatalf("message %q lacks the TokenReview error", err)
		}
	}
	c.Advance(5*time.Second - time.Millisecond)
	_, _ = a.Authenticate(ctx, "garbage-token")
	if got := f.tokenN.Load(); got != 1 {
		t.Fatalf("TokenReviews within DenyTTL = %d, want 1", got)
	}
	c.Advance(time.Millisecond)
	_, _ = a.Authenticate(ctx, "garbage-token")
	if got := f.tokenN.Load(); got != 2 {
		t.Fatalf("TokenReviews after DenyTTL = %d, want 2", got)
	}
	if s := a.Stats().Token; s.Denied != 2 || s.Hits != 2 || s.Expired != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestTTLOptions(t *testing.T) {
	for _, tc := range []struct {
		name              string
		o                 Options
		allowFor, denyFor time.Duration // 0: not cached
	}{
		{"defaults", Options{}, 10 * time.Second, 5 * time.Second},
		{"ttl only", Options{TTL: time.Minute}, time.Minute, 30 * time.Second},
		{"both", Options{TTL: time.Minute, DenyTTL: time.Second}, time.Minute, time.Second},
		{"no deny cache", Options{DenyTTL: -1}, 10 * time.Second, 0},
		{"no cache", Options{TTL: -1}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, probe := range []struct {
				token string
				for_  time.Duration
			}{{goodToken, tc.allowFor}, {"bad", tc.denyFor}} {
				a, f, c := setup(t, tc.o)
				_, _ = a.Authenticate(context.Background(), probe.token)
				if probe.for_ > 0 {
					c.Advance(probe.for_ - time.Nanosecond)
					_, _ = a.Authenticate(context.Background(), probe.token)
					if n := f.tokenN.Load(); n != 1 {
						t.Fatalf("%s: reviews just before %v = %d, want 1", probe.token, probe.for_, n)
					}
					c.Advance(time.Nanosecond)
				}
				_, _ = a.Authenticate(context.Background(), probe.token)
				if n := f.tokenN.Load(); n != 2 {
					t.Fatalf("%s: reviews at %v = %d, want 2", probe.token, probe.for_, n)
				}
			}
		})
	}
}

func TestTokenAPIFailureNotCached(t *testing.T) {
	a, f, _ := setup(t, Options{})
	f.tokenErr = fmt.Errorf("dial tcp 10.0.0.1:443: connect: connection refused (token %s)", goodToken)
	for range 3 {
		_, err := a.Authenticate(context.Background(), goodToken)
		var ue *UnavailableError
		if !errors.As(err, &ue) || ue.Review != "TokenReview" || StatusCode(err) != http.StatusServiceUnavailable {
			t.Fatalf("err = %#v, want *UnavailableError 503", err)
		}
		var unauth *UnauthenticatedError
		if errors.As(err, &unauth) {
			t.Fatal("an API failure reads as unauthenticated")
		}
		if strings.Contains(err.Error(), goodToken) {
			t.Fatalf("message holds the token: %q", err)
		}
	}
	if s := a.Stats().Token; s.Reviews != 3 || s.Errors != 3 || s.Entries != 0 {
		t.Fatalf("stats = %+v, want 3 reviews, 3 errors, nothing cached", s)
	}
	f.tokenErr = nil
	if _, err := a.Authenticate(context.Background(), goodToken); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
}

func TestReviewForbiddenNamesAuthDelegator(t *testing.T) {
	a, f, _ := setup(t, Options{})
	f.tokenErr = apierrors.NewForbidden(schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}, "",
		errors.New(`User "system:serviceaccount:stackflow:analysis" cannot create resource`))
	_, err := a.Authenticate(context.Background(), goodToken)
	if StatusCode(err) != http.StatusServiceUnavailable || !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), "system:auth-delegator") {
		t.Fatalf("err = %v (status %d)", err, StatusCode(err))
	}
	f.tokenErr = nil
	f.sarErr = apierrors.NewForbidden(schema.GroupResource{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, "", errors.New("no"))
	u, _ := a.Authenticate(context.Background(), goodToken)
	_, err = a.AuthorizeStack(context.Background(), u, "dev", "web")
	if StatusCode(err) != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "subjectaccessreviews.authorization.k8s.io") {
		t.Fatalf("err = %v", err)
	}
}

func TestTokenNeverInMessages(t *testing.T) {
	const secret = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0.c2ln-secret"
	a, f, _ := setup(t, Options{})
	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(fmt.Sprintf("%+v", err), secret) {
			t.Fatalf("%s: message holds the token: %q", what, err)
		}
	}
	// The TokenReview's own error quoting the token.
	f.users = map[string]authenticationv1.UserInfo{}
	c := f.client()
	c.PrependReactor("create", "tokenreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		tr := action.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		tr.Status.Error = "token " + tr.Spec.Token + " is not valid"
		return true, tr, nil
	})
	a.client = c
	_, err := a.Authenticate(context.Background(), secret)
	check("rejected", err)
	if !strings.Contains(err.Error(), "token [secret] is not valid") {
		t.Fatalf("message = %q", err)
	}
	// An API failure quoting it.
	a2, f2, _ := setup(t, Options{})
	f2.tokenErr = errors.New("bad request: " + secret)
	_, err = a2.Authenticate(context.Background(), secret)
	check("api failure", err)
	// Headers: none of the parsing errors quotes the header.
	for _, h := range []string{secret, "Basic " + secret, "Bearer " + secret + " x", "bearer\t" + secret} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", h)
		_, err := a.Check(r, StackTarget("dev", "web"))
		check("header "+h, err)
	}
}

func TestJWTExpiryBoundsTokenCache(t *testing.T) {
	a, f, c := setup(t, Options{})
	exp := c.Now().Add(3 * time.Second)
	payload := base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf(`{"sub":"x","exp":%d}`, exp.Unix())))
	jwt := "eyJhbGciOiJFUzI1NiJ9." + payload + ".c2ln"
	f.users[jwt] = verifier
	ctx := context.Background()
	_, _ = a.Authenticate(ctx, jwt)
	c.Advance(3*time.Second - time.Millisecond)
	_, _ = a.Authenticate(ctx, jwt)
	if n := f.tokenN.Load(); n != 1 {
		t.Fatalf("reviews before exp = %d, want 1", n)
	}
	c.Advance(time.Millisecond)
	_, _ = a.Authenticate(ctx, jwt)
	if n := f.tokenN.Load(); n != 2 {
		t.Fatalf("reviews at exp (3s, before the 10s TTL) = %d, want 2", n)
	}
}

func TestLRUEviction(t *testing.T) {
	a, f, _ := setup(t, Options{MaxEntries: 3})
	ctx := context.Background()
	for i := range 3 {
		f.users[fmt.Sprint("t", i)] = verifier
		_, _ = a.Authenticate(ctx, fmt.Sprint("t", i))
	}
	_, _ = a.Authenticate(ctx, "t0") // t0 most recently used; t1 is now oldest
	f.users["t3"] = verifier
	_, _ = a.Authenticate(ctx, "t3") // evicts t1
	if s := a.Stats().Token; s.Entries != 3 || s.Evictions != 1 {
		t.Fatalf("stats = %+v, want 3 entries, 1 eviction", s)
	}
	n := f.tokenN.Load()
	for _, tok := range []string{"t0", "t2", "t3"} {
		_, _ = a.Authenticate(ctx, tok)
	}
	if got := f.tokenN.Load(); got != n {
		t.Fatalf("t0, t2, t3 should be cached; reviews went %d -> %d", n, got)
	}
	_, _ = a.Authenticate(ctx, "t1")
	if got := f.tokenN.Load(); got != n+1 {
		t.Fatalf("t1 should have been evicted; reviews %d -> %d", n, got)
	}
	// A bound of 10,000 over 25,000 distinct tokens.
	b, fb, _ := setup(t, Options{})
	fb.users = nil
	for i := range 25000 {
		_, _ = b.Authenticate(ctx, fmt.Sprint("bad-", i))
	}
	if s := b.Stats().Token; s.Entries != DefaultMaxEntries || s.Evictions != 15000 {
		t.Fatalf("stats = %+v, want 10000 entries and 15000 evictions", s)
	}
}

func TestAuthorizeStack(t *testing.T) {
	a, f, c := setup(t, Options{})
	ctx := context.Background()
	u, err := a.Authenticate(ctx, goodToken)
	if err != nil {
		t.Fatal(err)
	}
	d, err := a.AuthorizeStack(ctx, u, "dev", "web")
	if err != nil || !d.Allowed || d.Cached {
		t.Fatalf("first: %+v, %v", d, err)
	}
	want := authorizationv1.SubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "dev", Verb: "get", Group: "pulumi.com", Resource: "stacks", Name: "web"},
		User:               verifier.Username, UID: "uid-1", Groups: verifier.Groups,
		Extra: map[string]authorizationv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"p-1"}},
	}
	if d := cmp.Diff(want, f.sarReqs[0]); d != "" {
		t.Fatalf("SAR spec (-want +got):\n%s", d)
	}
	d, err = a.AuthorizeStack(ctx, u, "dev", "web")
	if err != nil || !d.Allowed || !d.Cached {
		t.Fatalf("second: %+v, %v", d, err)
	}
	// Another name, namespace, or the same user with its groups reordered.
	_, _ = a.AuthorizeStack(ctx, u, "dev", "api")
	_, _ = a.AuthorizeStack(ctx, u, "prod", "web")
	u2 := cloneUser(u)
	u2.Groups[0], u2.Groups[2] = u2.Groups[2], u2.Groups[0]
	if d, _ := a.AuthorizeStack(ctx, u2, "dev", "web"); !d.Cached {
		t.Fatal("group order changed the cache key")
	}
	u3 := cloneUser(u)
	u3.Extra["authentication.kubernetes.io/pod-name"] = []string{"p-2"}
	if d, _ := a.AuthorizeStack(ctx, u3, "dev", "web"); d.Cached {
		t.Fatal("a different extra hit the cache")
	}
	if s := a.Stats().Access; s.Reviews != 4 || s.Hits != 2 || s.Misses != 4 {
		t.Fatalf("access stats = %+v", s)
	}

	// Denied: a 403 naming the user and the grant; cached for DenyTTL.
	o, err := a.Authenticate(ctx, otherToken)
	if err != nil {
		t.Fatal(err)
	}
	d, err = a.AuthorizeStack(ctx, o, "dev", "web")
	var fe *ForbiddenError
	if !errors.As(err, &fe) || d.Allowed || StatusCode(err) != http.StatusForbidden {
		t.Fatalf("denied: %+v, %#v", d, err)
	}
	wantMsg := `"system:serviceaccount:kargo-demo:other" cannot get stacks.pulumi.com "web" in namespace "dev": grant it get on stacks.pulumi.com (see analysis/config/kargo-project)`
	if err.Error() != wantMsg {
		t.Fatalf("message\n got %s\nwant %s", err, wantMsg)
	}
	if fe.User.Name != other.Username || fe.Namespace != "dev" || fe.Name != "web" {
		t.Fatalf("ForbiddenError fields = %+v", fe)
	}
	n := f.sarN.Load()
	c.Advance(5*time.Second - time.Millisecond)
	if d, err := a.AuthorizeStack(ctx, o, "dev", "web"); !d.Cached || err == nil {
		t.Fatalf("denial not cached: %+v %v", d, err)
	}
	// The allow of u is still cached (10s); at 5s the denial expires.
	c.Advance(time.Millisecond)
	if d, _ := a.AuthorizeStack(ctx, u, "dev", "web"); !d.Cached {
		t.Fatal("allow expired before TTL")
	}
	if d, _ := a.AuthorizeStack(ctx, o, "dev", "web"); d.Cached {
		t.Fatal("denial outlived DenyTTL")
	}
	if got := f.sarN.Load(); got != n+1 {
		t.Fatalf("SARs %d -> %d, want one more", n, got)
	}
}

func TestAuthorizePath(t *testing.T) {
	a, f, _ := setup(t, Options{GrantHint: "see docs/analysis.md"})
	f.allow = func(s authorizationv1.SubjectAccessReviewSpec) bool {
		return s.User == verifier.Username && s.NonResourceAttributes != nil &&
			strings.HasPrefix(s.NonResourceAttributes.Path, "/v1/pulumi/") && s.NonResourceAttributes.Verb == "get"
	}
	ctx := context.Background()
	u, _ := a.Authenticate(ctx, goodToken)
	const path = "/v1/pulumi/acme/web/dev/verify"
	if d, err := a.AuthorizePath(ctx, u, path); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	if got := f.sarReqs[0]; got.ResourceAttributes != nil || *got.NonResourceAttributes != (authorizationv1.NonResourceAttributes{Path: path, Verb: "get"}) {
		t.Fatalf("SAR spec = %+v", got)
	}
	if d, _ := a.AuthorizePath(ctx, u, path); !d.Cached {
		t.Fatal("not cached")
	}
	// A Stack "web" in namespace "" is not the path: different keys.
	if d, _ := a.AuthorizeStack(ctx, u, "", path); d.Cached {
		t.Fatal("resource and path share a key")
	}
	o, _ := a.Authenticate(ctx, otherToken)
	_, err := a.AuthorizePath(ctx, o, path)
	want := `"system:serviceaccount:kargo-demo:other" cannot get path "/v1/pulumi/acme/web/dev/verify": grant it get on nonResourceURLs "/v1/pulumi/acme/web/dev/verify" in a ClusterRole bound to it, a trailing * matches a prefix (see docs/analysis.md)`
	if err == nil || err.Error() != want || StatusCode(err) != 403 {
		t.Fatalf("err\n got %v\nwant %s", err, want)
	}
}

func TestSARFailureNotCached(t *testing.T) {
	a, f, _ := setup(t, Options{})
	ctx := context.Background()
	u, _ := a.Authenticate(ctx, goodToken)
	f.sarErr = apierrors.NewServiceUnavailable("etcd leader changed")
	for range 2 {
		_, err := a.AuthorizeStack(ctx, u, "dev", "web")
		var ue *UnavailableError
		if !errors.As(err, &ue) || ue.Review != "SubjectAccessReview" || StatusCode(err) != 503 {
			t.Fatalf("err = %#v", err)
		}
	}
	f.sarErr = nil
	if d, err := a.AuthorizeStack(ctx, u, "dev", "web"); err != nil || !d.Allowed || d.Cached {
		t.Fatalf("after recovery: %+v %v", d, err)
	}
	if s := a.Stats().Access; s.Errors != 2 || s.Allowed != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name     string
		headers  []string
		target   Target
		tokenErr error
		status   int
		kind     UnauthenticatedKind
		user     string
	}{
		{name: "allowed", headers: []string{"Bearer " + goodToken}, target: StackTarget("dev", "web"), status: 200, user: verifier.Username},
		{name: "lower-case scheme", headers: []string{"bearer " + goodToken}, target: StackTarget("dev", "web"), status: 200, user: verifier.Username},
		{name: "path allowed", headers: []string{"Bearer " + goodToken}, target: PathTarget("/v1/pulumi/a/b/c"), status: 200, user: verifier.Username},
		{name: "no header", status: 401, kind: Missing},
		{name: "empty header", headers: []string{""}, status: 401, kind: Missing},
		{name: "empty token", headers: []string{"Bearer "}, status: 401, kind: Missing},
		{name: "no scheme", headers: []string{goodToken}, status: 401, kind: Malformed},
		{name: "basic", headers: []string{"Basic dXNlcjpwYXNz"}, status: 401, kind: Malformed},
		{name: "two tokens", headers: []string{"Bearer a b"}, status: 401, kind: Malformed},
		{name: "two headers", headers: []string{"Bearer " + goodToken, "Bearer " + goodToken}, status: 401, kind: Malformed},
		{name: "garbage token", headers: []string{"Bearer garbage"}, status: 401, kind: Rejected},
		{name: "denied", headers: []string{"Bearer " + otherToken}, target: StackTarget("dev", "web"), status: 403},
		{name: "path denied", headers: []string{"Bearer " + otherToken}, target: PathTarget("/v1/pulumi/a"), status: 403},
		{name: "api down", headers: []string{"Bearer " + goodToken}, tokenErr: errors.New("connection refused"), status: 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, f, _ := setup(t, Options{})
			f.tokenErr = tc.tokenErr
			r := httptest.NewRequest("GET", "/v1/verify", nil)
			for _, h := range tc.headers {
				r.Header.Add("Authorization", h)
			}
			u, err := a.Check(r, tc.target)
			if got := StatusCode(err); got != tc.status {
				t.Fatalf("status %d (%v), want %d", got, err, tc.status)
			}
			if u.Name != tc.user {
				t.Fatalf("user %q, want %q", u.Name, tc.user)
			}
			var h HTTPError
			if err != nil && !errors.As(err, &h) {
				t.Fatalf("%T is not an HTTPError", err)
			}
			if tc.kind != "" {
				var ue *UnauthenticatedError
				if !errors.As(err, &ue) || ue.Kind != tc.kind {
					t.Fatalf("err = %#v, want kind %s", err, tc.kind)
				}
				if !strings.HasPrefix(ue.Challenge(), "Bearer ") || h.Reason() != "Unauthorized" {
					t.Fatalf("challenge %q reason %q", ue.Challenge(), h.Reason())
				}
			}
		})
	}
}

func TestAudiences(t *testing.T) {
	a, f, _ := setup(t, Options{Audiences: []string{"stackflow-analysis"}})
	ctx := context.Background()
	f.audiences = []string{"https://kubernetes.default.svc"}
	_, err := a.Authenticate(ctx, goodToken)
	var ue *UnauthenticatedError
	if !errors.As(err, &ue) || ue.Kind != Rejected || !strings.Contains(err.Error(), `accepts tokens for the audiences ["stackflow-analysis"]`) {
		t.Fatalf("err = %v", err)
	}
	if got := f.tokenReqs[0].Audiences; !cmp.Equal(got, []string{"stackflow-analysis"}) {
		t.Fatalf("audiences sent = %v", got)
	}
	b, fb, _ := setup(t, Options{Audiences: []string{"stackflow-analysis"}})
	fb.audiences = []string{"stackflow-analysis"}
	if _, err := b.Authenticate(ctx, goodToken); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentMissesShareOneReview(t *testing.T) {
	a, f, _ := setup(t, Options{})
	f.block = make(chan struct{})
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			_, err := a.Authenticate(context.Background(), goodToken)
			errs <- err
		})
	}
	// Let the callers pile up on the one review, then release it.
	for f.tokenN.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(f.block)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	s := a.Stats().Token
	if s.Reviews != 1 || s.Hits+s.Misses != n {
		t.Fatalf("stats = %+v, want 1 review for %d calls", s, n)
	}
	t.Logf("%d concurrent calls: %d review(s), %d hits, %d misses", n, s.Reviews, s.Hits, s.Misses)
}

func TestCallerGivingUpDoesNotFailOthers(t *testing.T) {
	a, f, _ := setup(t, Options{})
	f.block = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { _, err := a.Authenticate(ctx, goodToken); first <- err }()
	for f.tokenN.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	second := make(chan error, 1)
	go func() { _, err := a.Authenticate(context.Background(), goodToken); second <- err }()
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) || StatusCode(err) != 499 {
		t.Fatalf("first: %v", err)
	}
	close(f.block)
	if err := <-second; err != nil {
		t.Fatalf("second: %v", err)
	}
	if n := f.tokenN.Load(); n != 1 {
		t.Fatalf("reviews = %d, want 1", n)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	a, _, _ := setup(t, Options{Registerer: reg})
	ctx := context.Background()
	u, _ := a.Authenticate(ctx, goodToken)
	_, _ = a.Authenticate(ctx, goodToken)
	_, _ = a.Authenticate(ctx, "bad")
	_, _ = a.AuthorizeStack(ctx, u, "dev", "web")
	want := `
# HELP stackflow_analysis_auth_cache_hits_total Answers served from the auth cache.
# TYPE stackflow_analysis_auth_cache_hits_total counter
stackflow_analysis_auth_cache_hits_total{cache="access"} 0
stackflow_analysis_auth_cache_hits_total{cache="token"} 1
# HELP stackflow_analysis_auth_cache_misses_total Auth cache lookups that found no live entry.
# TYPE stackflow_analysis_auth_cache_misses_total counter
stackflow_analysis_auth_cache_misses_total{cache="access"} 1
stackflow_analysis_auth_cache_misses_total{cache="token"} 2
# HELP stackflow_analysis_auth_reviews_total TokenReviews (cache=token) and SubjectAccessReviews (cache=access) sent, by result.
# TYPE stackflow_analysis_auth_reviews_total counter
stackflow_analysis_auth_reviews_total{cache="access",result="allowed"} 1
stackflow_analysis_auth_reviews_total{cache="access",result="denied"} 0
stackflow_analysis_auth_reviews_total{cache="access",result="error"} 0
stackflow_analysis_auth_reviews_total{cache="token",result="allowed"} 1
stackflow_analysis_auth_reviews_total{cache="token",result="denied"} 1
stackflow_analysis_auth_reviews_total{cache="token",result="error"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"stackflow_analysis_auth_cache_hits_total", "stackflow_analysis_auth_cache_misses_total",
		"stackflow_analysis_auth_reviews_total"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 16 {
		t.Fatalf("series = %d, %v; want 16 (8 series per cache)", n, err)
	}
}

func TestBearerTokenTrims(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "  Bearer   abc  ")
	if tok, err := BearerToken(r); err != nil || tok != "abc" {
		t.Fatalf("%q %v", tok, err)
	}
}

// TestUnavailableMessageHoldsNoAPIServerText: a 503's Message, what an
// answer says, is a fixed sentence naming the review; its Error, for the
// log, keeps client-go's text (the API server's address, the service's own
// user) with URL credentials masked.
func TestUnavailableMessageHoldsNoAPIServerText(t *testing.T) {
	const self = `system:serviceaccount:stackflow-system:stackflow-analysis`
	a, f, _ := setup(t, Options{})
	ctx := context.Background()
	f.tokenErr = &url.Error{Op: "Post", URL: "https://analysis:pw-0123456789abcdef@10.96.0.1:6443/apis/authentication.k8s.io/v1/tokenreviews",
		Err: errors.New("dial tcp 10.96.0.1:6443: connect: connection refused")}
	_, err := a.Authenticate(ctx, goodToken)
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.Message() != "cannot authenticate the caller now: the Kubernetes API server did not answer the TokenReview; retry later" {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "https://***@10.96.0.1:6443") || strings.Contains(err.Error(), "pw-0123456789abcdef") {
		t.Fatalf("the error for the log: %q, want the address with its credentials masked", err)
	}
	f.tokenErr = nil
	f.sarErr = apierrors.NewForbidden(schema.GroupResource{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, "",
		errors.New(`User "`+self+`" cannot create resource`))
	u, _ := a.Authenticate(ctx, goodToken)
	_, err = a.AuthorizeStack(ctx, u, "dev", "web")
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), self) {
		t.Fatalf("err = %v", err)
	}
	if m := ue.Message(); strings.Contains(m, "stackflow-analysis") || !strings.Contains(m, "SubjectAccessReview") {
		t.Fatalf("message %q", m)
	}
}
