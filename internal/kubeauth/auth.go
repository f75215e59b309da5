package kubeauth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stackflow-io/stackflow/internal/redact"
)

// Defaults of Options.
const (
	DefaultTTL        = 10 * time.Second
	DefaultMaxEntries = 10000
	DefaultTimeout    = 5 * time.Second
	DefaultGrantHint  = "see analysis/config/kargo-project"
)

// Options configure an Authorizer.
type Options struct {
	// Client reaches the API server: it creates TokenReviews
	// (authentication.k8s.io/v1) and SubjectAccessReviews
	// (authorization.k8s.io/v1), so its identity needs create on both
	// (the ClusterRole system:auth-delegator).
	Client kubernetes.Interface
	// TTL is how long a positive answer (an authenticated token, an allowed
	// access) is cached; default 10s, negative disables all caching. A
	// token's cached authentication never outlives the token's own exp
	// claim.
	TTL time.Duration
	// DenyTTL is how long a negative answer (a rejected token, a denied
	// access) is cached; default TTL/2 (5s), negative caches none. It is
	// shorter than TTL because a denial is what an operator fixes (by
	// creating the RoleBinding the 403 names) and then retries at once:
	// the fix shows within DenyTTL, while a retry loop of a denied caller
	// still costs at most one review per DenyTTL. API failures are never
	// cached.
	DenyTTL time.Duration
	// MaxEntries bounds each cache (tokens, accesses); default 10000. The
	// least recently used entry is evicted first.
	MaxEntries int
	// Audiences, when set, are sent with every TokenReview; a token is
	// authenticated only if the API server says it is meant for one of
	// them.
	Audiences []string
	// Timeout bounds each review request; default 5s.
	Timeout time.Duration
	// GrantHint ends every 403 message, telling where the RBAC to grant is
	// described; default "see analysis/config/kargo-project".
	GrantHint string
	// RefreshAhead refreshes a positive answer in the background from a
	// random point between half and three quarters of its TTL, when a
	// request hits it: callers get the cached answer meanwhile and rarely
	// wait for a review at expiry, and entries filled together do not
	// expire together. No answer is served older than TTL.
	RefreshAhead bool
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Registerer, when set, has the Authorizer registered on it as a
	// Prometheus collector of the cache counts (see Describe); New panics
	// if registration fails, as prometheus.MustRegister does.
	Registerer prometheus.Registerer
}

// User is an authenticated caller, as the TokenReview reported it.
type User struct {
	// Name is e.g. system:serviceaccount:kargo-demo:verifier.
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// String is the user name.
func (u User) String() string { return u.Name }

// Decision is the answer of a SubjectAccessReview.
type Decision struct {
	Allowed bool
	// Reason is the review's status.reason (often empty under RBAC).
	Reason string
	// Cached says the answer came from the cache, not the API server.
	Cached bool
}

// Authorizer checks callers against the Kubernetes API, caching the answers.
// It is safe for concurrent use.
type Authorizer struct {
	client      kubernetes.Interface
	ttl         time.Duration
	denyTTL     time.Duration
	audiences   []string
	timeout     time.Duration
	hint        string
	now         func() time.Time
	tokens      *cache[tokenAnswer]
	accesses    *cache[accessAnswer]
	noCaching   bool
	noDenyCache bool
	refresh     bool
}

type tokenAnswer struct {
	ok     bool
	user   User
	detail string // status.error, redacted
}

type accessAnswer struct {
	allowed bool
	reason  string
}

// New returns an Authorizer. It panics if o.Client is nil.
func New(o Options) *Authorizer {
	if o.Client == nil {
		panic("auth.New: Options.Client is nil")
	}
	a := &Authorizer{
		client: o.Client, ttl: o.TTL, denyTTL: o.DenyTTL,
		audiences: slices.Clone(o.Audiences), timeout: o.Timeout, hint: o.GrantHint, now: o.Now, refresh: o.RefreshAhead,
	}
	if a.ttl == 0 {
		a.ttl = DefaultTTL
	}
	if a.ttl < 0 {
		a.noCaching = true
	}
	if a.denyTTL == 0 {
		a.denyTTL = a.ttl / 2
	}
	if a.denyTTL <= 0 {
		a.noDenyCache = true
	}
	if a.timeout <= 0 {
		a.timeout = DefaultTimeout
	}
	if a.hint == "" {
		a.hint = DefaultGrantHint
	}
	if a.now == nil {
		a.now = time.Now
	}
	max := o.MaxEntries
	if max <= 0 {
		max = DefaultMaxEntries
	}
	a.tokens, a.accesses = newCache[tokenAnswer](max), newCache[accessAnswer](max)
	if o.Registerer != nil {
		o.Registerer.MustRegister(a)
	}
	return a
}

// Stats returns the counts of both caches.
func (a *Authorizer) Stats() Stats {
	return Stats{Token: a.tokens.stats(), Access: a.accesses.stats()}
}

// BearerToken returns the token of r's `Authorization: Bearer <token>` header,
// or an *UnauthenticatedError (Missing or Malformed) that does not quote the
// header.
func BearerToken(r *http.Request) (string, error) {
	hs := r.Header.Values("Authorization")
	switch {
	case len(hs) == 0 || strings.TrimSpace(hs[0]) == "" && len(hs) == 1:
		return "", &UnauthenticatedError{Kind: Missing,
			msg: "missing Authorization header: send `Authorization: Bearer <token>` with a Kubernetes ServiceAccount token"}
	case len(hs) > 1:
		return "", &UnauthenticatedError{Kind: Malformed,
			msg: "more than one Authorization header: send exactly one, `Authorization: Bearer <token>`"}
	}
	scheme, token, _ := strings.Cut(strings.TrimSpace(hs[0]), " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") {
		return "", &UnauthenticatedError{Kind: Malformed,
			msg: "malformed Authorization header: expected `Bearer <token>` with a Kubernetes ServiceAccount token"}
	}
	if token == "" {
		return "", &UnauthenticatedError{Kind: Missing,
			msg: "empty bearer token: send `Authorization: Bearer <token>` with a Kubernetes ServiceAccount token"}
	}
	if strings.ContainsAny(token, " \t\r\n") {
		return "", &UnauthenticatedError{Kind: Malformed,
			msg: "malformed bearer token: it holds white space"}
	}
	return token, nil
}

// Target is what Check authorises: a Stack or a non-resource path.
type Target struct {
	// Namespace and Name of a Stack (get on stacks.pulumi.com).
	Namespace, Name string
	// Path, when set, is a non-resource URL (get) instead.
	Path string
}

// StackTarget is get on the Stack namespace/name.
func StackTarget(namespace, name string) Target { return Target{Namespace: namespace, Name: name} }

// PathTarget is get on the non-resource URL path.
func PathTarget(path string) Target { return Target{Path: path} }

// Check authenticates the bearer token of r and authorises its user for t. The
// error is an *UnauthenticatedError (401), *ForbiddenError (403) or
// *UnavailableError (503) — see StatusCode — or the context's error if r's
// context ended first.
func (a *Authorizer) Check(r *http.Request, t Target) (User, error) {
	token, err := BearerToken(r)
	if err != nil {
		return User{}, err
	}
	u, err := a.Authenticate(r.Context(), token)
	if err != nil {
		return User{}, err
	}
	if t.Path != "" {
		_, err = a.AuthorizePath(r.Context(), u, t.Path)
	} else {
		_, err = a.AuthorizeStack(r.Context(), u, t.Namespace, t.Name)
	}
	if err != nil {
		return User{}, err
	}
	return u, nil
}

// Authenticate returns the user of a bearer token, from a TokenReview cached by
// the token's SHA-256. A rejected token gives an *UnauthenticatedError
// (cached for DenyTTL), a failed review an *UnavailableError (not cached).
func (a *Authorizer) Authenticate(ctx context.Context, token string) (User, error) {
	if token == "" {
		return User{}, &UnauthenticatedError{Kind: Missing, msg: "empty bearer token"}
	}
	k := key(sha256.Sum256([]byte(token)))
	now := a.now()
	review := func(ctx context.Context) (tokenAnswer, error) { return a.reviewToken(ctx, k, token) }
	ans, ok, due := a.tokens.lookup(k, now)
	if due {
		a.tokens.refresh(ctx, k, a.timeout, review)
	}
	if !ok {
		var err error
		if ans, err = a.tokens.do(ctx, k, now, a.timeout, review); err != nil {
			return User{}, err
		}
	}
	if !ans.ok {
		msg := "the bearer token was rejected by a Kubernetes TokenReview"
		if ans.detail != "" {
			msg += ": " + ans.detail
		}
		if len(a.audiences) > 0 {
			msg += fmt.Sprintf(" (this service accepts tokens for the audiences %q only: send a ServiceAccount token minted for one of them, such as a projected token volume with that audience, not the token a pod uses with the API server)", a.audiences)
		}
		return User{}, &UnauthenticatedError{Kind: Rejected, Detail: ans.detail, msg: msg}
	}
	return cloneUser(ans.user), nil
}

func (a *Authorizer) reviewToken(ctx context.Context, k key, token string) (tokenAnswer, error) {
	tr, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: a.audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		a.tokens.errors.Add(1)
		return tokenAnswer{}, &UnavailableError{Review: "TokenReview", err: err,
			msg: "cannot authenticate the caller: TokenReview failed: " + redact.URLCredentials(redactToken(err.Error(), token)) + permissionHint(err, "tokenreviews.authentication.k8s.io")}
	}
	now := a.now()
	st := tr.Status
	if !st.Authenticated || st.Error != "" || !a.audienceOK(st.Audiences) {
		a.tokens.denied.Add(1)
		ans := tokenAnswer{detail: redactToken(st.Error, token)}
		if ans.detail == "" && st.Authenticated {
			ans.detail = "the token is not meant for this service's audiences"
		}
		if !a.noCaching && !a.noDenyCache {
			a.tokens.add(k, ans, now.Add(a.denyTTL))
		}
		return ans, nil
	}
	a.tokens.allowed.Add(1)
	ans := tokenAnswer{ok: true, user: User{Name: st.User.Username, UID: st.User.UID, Groups: slices.Clone(st.User.Groups)}}
	if len(st.User.Extra) > 0 {
		ans.user.Extra = make(map[string][]string, len(st.User.Extra))
		for k, v := range st.User.Extra {
			ans.user.Extra[k] = slices.Clone([]string(v))
		}
	}
	if !a.noCaching {
		expires := now.Add(a.ttl)
		if exp, ok := jwtExpiry(token); ok && exp.Before(expires) {
			expires = exp
		}
		a.tokens.addRefreshing(k, ans, expires, a.refreshAt(now, expires))
	}
	return ans, nil
}

// audienceOK is true when no audiences were asked for or the API server
// reported one of them (the TokenReview API leaves this check to the caller).
func (a *Authorizer) audienceOK(got []string) bool {
	if len(a.audiences) == 0 {
		return true
	}
	for _, g := range got {
		if slices.Contains(a.audiences, g) {
			return true
		}
	}
	return false
}

// jwtExpiry reads the exp claim of a JWT without checking it: it only ever
// shortens how long an authentication is cached.
func jwtExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var c struct {
		Exp *float64 `json:"exp"`
	}
	if json.Unmarshal(b, &c) != nil || c.Exp == nil {
		return time.Time{}, false
	}
	return time.Unix(int64(*c.Exp), 0), true
}

// AuthorizeStack asks whether u may get the Stack namespace/name
// (stacks.pulumi.com). The error is nil exactly when the Decision allows:
// a denial gives an *ForbiddenError naming the user and the permission to
// grant, a failed review an *UnavailableError (not cached).
func (a *Authorizer) AuthorizeStack(ctx context.Context, u User, namespace, name string) (Decision, error) {
	d, err := a.authorize(ctx, u, &authorizationv1.ResourceAttributes{
		Namespace: namespace, Verb: "get", Group: "pulumi.com", Resource: "stacks", Name: name,
	}, nil)
	if err == nil && !d.Allowed {
		msg := fmt.Sprintf("%q cannot get stacks.pulumi.com %q in namespace %q", u.Name, name, namespace)
		if d.Reason != "" {
			msg += " (" + d.Reason + ")"
		}
		msg += fmt.Sprintf(": grant it get on stacks.pulumi.com (%s)", a.hint)
		err = &ForbiddenError{User: u, Namespace: namespace, Name: name, SARReason: d.Reason, msg: msg}
	}
	return d, err
}

// AuthorizePath asks whether u may get the non-resource URL path (the Pulumi
// Cloud routes /v1/pulumi/...). Errors as for AuthorizeStack.
func (a *Authorizer) AuthorizePath(ctx context.Context, u User, path string) (Decision, error) {
	d, err := a.authorize(ctx, u, nil, &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"})
	if err == nil && !d.Allowed {
		msg := fmt.Sprintf("%q cannot get path %q", u.Name, path)
		if d.Reason != "" {
			msg += " (" + d.Reason + ")"
		}
		msg += fmt.Sprintf(": grant it get on nonResourceURLs %q in a ClusterRole bound to it, a trailing * matches a prefix (%s)", path, a.hint)
		err = &ForbiddenError{User: u, Path: path, SARReason: d.Reason, msg: msg}
	}
	return d, err
}

func (a *Authorizer) authorize(ctx context.Context, u User, ra *authorizationv1.ResourceAttributes, nra *authorizationv1.NonResourceAttributes) (Decision, error) {
	k := accessKey(u, ra, nra)
	now := a.now()
	review := func(ctx context.Context) (accessAnswer, error) {
		spec := authorizationv1.SubjectAccessReviewSpec{
			ResourceAttributes: ra, NonResourceAttributes: nra,
			User: u.Name, UID: u.UID, Groups: u.Groups,
		}
		if len(u.Extra) > 0 {
			spec.Extra = make(map[string]authorizationv1.ExtraValue, len(u.Extra))
			for k, v := range u.Extra {
				spec.Extra[k] = v
			}
		}
		sar, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(ctx,
			&authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			a.accesses.errors.Add(1)
			return accessAnswer{}, &UnavailableError{Review: "SubjectAccessReview", err: err,
				msg: "cannot authorise the caller: SubjectAccessReview failed: " + redact.URLCredentials(err.Error()) + permissionHint(err, "subjectaccessreviews.authorization.k8s.io")}
		}
		ans := accessAnswer{allowed: sar.Status.Allowed && !sar.Status.Denied, reason: sar.Status.Reason}
		ttl := a.ttl
		if ans.allowed {
			a.accesses.allowed.Add(1)
		} else {
			a.accesses.denied.Add(1)
			ttl = a.denyTTL
		}
		if !a.noCaching && (ans.allowed || !a.noDenyCache) {
			now := a.now()
			refreshAt := time.Time{}
			if ans.allowed {
				refreshAt = a.refreshAt(now, now.Add(ttl))
			}
			a.accesses.addRefreshing(k, ans, now.Add(ttl), refreshAt)
		}
		return ans, nil
	}
	ans, ok, due := a.accesses.lookup(k, now)
	if due {
		a.accesses.refresh(ctx, k, a.timeout, review)
	}
	if ok {
		return Decision{Allowed: ans.allowed, Reason: ans.reason, Cached: true}, nil
	}
	ans, err := a.accesses.do(ctx, k, now, a.timeout, review)
	if err != nil {
		return Decision{}, err
	}
	return Decision{Allowed: ans.allowed, Reason: ans.reason}, nil
}

// permissionHint explains a 403 on a review itself: the service's own
// identity lacks the right to create it.
func permissionHint(err error, resource string) string {
	if apierrors.IsForbidden(err) {
		return fmt.Sprintf(" (the analysis service's own identity needs create on %s: bind its ServiceAccount to the ClusterRole system:auth-delegator)", resource)
	}
	return ""
}

// accessKey is the SHA-256 of a length-prefixed encoding of the user (groups
// sorted, extra by sorted key) and the attributes.
func accessKey(u User, ra *authorizationv1.ResourceAttributes, nra *authorizationv1.NonResourceAttributes) key {
	h := sha256.New()
	w := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	w(u.Name)
	w(u.UID)
	groups := slices.Sorted(slices.Values(u.Groups))
	w(fmt.Sprint(len(groups)))
	for _, g := range groups {
		w(g)
	}
	keys := make([]string, 0, len(u.Extra))
	for k := range u.Extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	w(fmt.Sprint(len(keys)))
	for _, k := range keys {
		w(k)
		w(fmt.Sprint(len(u.Extra[k])))
		for _, v := range u.Extra[k] {
			w(v)
		}
	}
	if ra != nil {
		w("resource")
		w(ra.Verb)
		w(ra.Group)
		w(ra.Resource)
		w(ra.Namespace)
		w(ra.Name)
	} else {
		w("path")
		w(nra.Verb)
		w(nra.Path)
	}
	var k key
	h.Sum(k[:0])
	return k
}

func cloneUser(u User) User {
	u.Groups = slices.Clone(u.Groups)
	if u.Extra != nil {
		e := make(map[string][]string, len(u.Extra))
		for k, v := range u.Extra {
			e[k] = slices.Clone(v)
		}
		u.Extra = e
	}
	return u
}

// refreshAt is when a positive answer stored at now, expiring at expires,
// starts refreshing (RefreshAhead): at a random point between half and three
// quarters of its life; zero without RefreshAhead.
func (a *Authorizer) refreshAt(now, expires time.Time) time.Time {
	if !a.refresh || !expires.After(now) {
		return time.Time{}
	}
	life := expires.Sub(now)
	return now.Add(life/2 + time.Duration(rand.Int64N(int64(life/4)+1)))
}
